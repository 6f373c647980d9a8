"""Sweep files: load a YAML study, validate every key, expand it into trials.

A sweep file has these top-level keys (``name``, ``workload`` and a
``target_accuracy`` required); every key is declared in ``orchestrator.study.settings``::

    name: quickstart            # letters, digits, '-', '_', '.'; names the results folder
    workload: {...}             # training-loop settings: settings.WORKLOAD
    cluster: {...}              # settings.CLUSTER: use_gpu, backend, cpus_per_worker, ...,
                                # emulate: {hosts: 4, bandwidth: 100mbit} (settings.EMULATE)
    baselines: true             # add fp32 and fp16 to the compressors unless false
    max_concurrent_trials: 1    # trials that run at the same time (timing studies: 1)
    sweep:                      # grid axes; a scalar is a one-value axis
      num_workers: [1, 2]
      seed: [0, 1]
      bandwidth: [100mbit, 1gbit]   # emulated clusters: links re-shaped before each trial
      lr: [0.05, 0.1]           # any workload setting may be an axis instead
      algorithm: [sra, allgather]   # used by the compressors that support it, others keep theirs
      compressor:
        - fp32                  # a name, or a mapping with 'name' plus value lists that are
        - {name: qsgd, bits: [2, 4], bucket: 512}   # crossed within this entry only: the
        - {name: onebit, workload: {lr: [0.01]}}    # compressor's parameters, 'algorithm',
                                                    # and 'workload' settings for it alone

Every problem is a SweepFileError ``FILE:LINE: message`` naming the key, raised
before Ray is started (this module never imports Ray).

A trial is a flat dict: ``name`` (its label, orchestrator.study.labels: compressor,
the parameters and settings that tell it from the others, num_workers, seed),
``trial_id`` (a hash of the settings, stable across runs so ``--resume``
recognises finished trials) and every setting of ``settings.TRIAL_KEYS``;
``compressor_params`` is a dict of the compressor's own parameters (its
defaults filled), a namespace apart from the workload's settings; ``data_dir``
has ``~`` expanded (a relative one stays relative to where the sweep runs).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compressors.core.params import short_repr

from . import settings as schema
from .labels import config_labels
from .records import MARKER, kept_code
from .sweep_yaml import Checker, Entry, LineMapping, LineSequence, SweepFileError, read_yaml

__all__ = ["SweepFileError", "Sweep", "hierarchy_problem", "load_sweep", "settings_of", "trial_id_of"]


# ---------------------------------------------------------------- the validated study

_SECTIONS = ("workload", "cluster", "sweep")
# A folder named in a message is shown whole up to this length (a longer value is cut, as any other).
_PATH_LIMIT = 400
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file and its expanded trials."""

    name: str
    path: Path
    cluster: dict[str, Any]
    max_concurrent_trials: int
    trials: list[dict[str, Any]]
    predictor_inputs: bool = True
    preflight: bool = True
    # The line of each workload setting, sweep axis and cluster key where the file writes it, and of
    # "workload" itself: where a problem found later (the preflight) is reported.
    lines: dict[str, int] = field(default_factory=dict)
    # The user's .py files the trials name: as the sweep file writes them -> their absolute paths.
    files: dict[str, str] = field(default_factory=dict)


def settings_of(trial: dict[str, Any]) -> dict[str, Any]:
    """The settings of a trial: everything but its ``name`` and ``trial_id``."""
    return {key: value for key, value in trial.items() if key not in ("name", "trial_id")}


def trial_id_of(settings: dict[str, Any]) -> str:
    """A trial's id: a hash of its settings, a file of the user's code counted by its name and contents (not
    its folder), so that a study moved or cloned keeps its ids and an edited file gets new ones."""
    identity = dict(settings)
    for key in ("model", "dataset"):
        if isinstance(identity.get(key), str):
            identity[key] = _code_identity(identity[key])
    if identity.get("imports"):
        identity["imports"] = [_code_identity(text) for text in identity["imports"]]
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _code_identity(text: str) -> str:
    """``NAME.py@DIGEST:FACTORY`` for a reference to a file that exists here; anything else as it is."""
    where, colon, attr = text.rpartition(":") if ":" in text else (text, "", "")
    if not where.endswith(".py") or not os.path.isfile(where):
        return text
    stat = os.stat(where)
    return f"{os.path.basename(where)}@{_digest(where, stat.st_mtime_ns, stat.st_size)}{colon}{attr}"


@functools.lru_cache(maxsize=256)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    """The sha256 of a file's contents (cached while it is unchanged: every trial of a grid asks)."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def training_settings(trial: dict[str, Any]) -> dict[str, Any]:
    """What the training loop takes of a trial (num_workers is the launcher's)."""
    return {key: trial[key] for key in schema.TRAINING_KEYS}


def _beside(sweep_path: Path, text: str, files: dict[str, str]) -> str:
    """``text`` with a relative ``.py`` file in it (an import, or FILE.py:FACTORY) made absolute against the
    sweep file's folder (where that folder is a results folder without the file: its kept copy); anything
    else as it is. ``files`` gains the file as written -> its absolute path."""
    where, colon, attr = text.rpartition(":") if ":" in text else (text, "", "")
    if not where.endswith(".py"):
        return text
    written = os.path.normpath(os.path.expanduser(where))
    path = Path(written)
    if not path.is_absolute():
        folder = sweep_path.resolve().parent
        path = folder / written
        kept = kept_code(folder, written)
        if not path.is_file() and (folder / MARKER).is_file() and kept.is_file():
            path = kept  # `run RESULTS/sweep.yaml --resume`: the files its trials ran
    files[written] = str(path)
    return f"{path}{colon}{attr}"


def _emulate(check: Checker, cluster_map: LineMapping, sweep_map: LineMapping) -> dict[str, Any]:
    """``cluster.emulate``, checked: hosts required, a bandwidth here or as a sweep axis (not both)."""
    line = cluster_map.lines["emulate"]
    emulate_map = check.mapping(cluster_map["emulate"], "cluster.emulate", line)
    emulate = check.section(emulate_map, schema.EMULATE, "cluster.emulate")
    if emulate["hosts"] is None:
        raise check.fail(line, f"cluster.emulate needs hosts ({schema.EMULATE[0].describe()})")
    if emulate["bandwidth"] is None and "bandwidth" not in sweep_map:
        raise check.fail(line, "cluster.emulate needs a bandwidth (like 100mbit), here or as the sweep axis "
                               "'bandwidth'")
    if emulate["bandwidth"] is not None and "bandwidth" in sweep_map:
        raise check.fail(sweep_map.lines["bandwidth"], "bandwidth is set in both cluster.emulate and sweep; "
                                                       "keep one")
    return emulate


def _sweep_name(check: Checker, top: LineMapping) -> str:
    name = top.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise check.fail(top.lines.get("name", 1), f"name {schema.param('name').doc}, got {short_repr(name)}")
    return name


def _axis_hints() -> dict[str, str]:
    """Why a grid axis is not allowed outside 'sweep'."""
    return {p.name: "it is a grid axis; put it under 'sweep'" for p in schema.AXES}


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read, validate and expand a sweep file, or raise SweepFileError (file:line: message)."""
    path = Path(path)
    check = Checker(path)
    top = check.mapping(read_yaml(path), "the sweep file", 1)
    # A package beside the sweep file (`mylab.models:fn`) is found wherever the sweep runs from; installed
    # packages come first.
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)
    check.keys(top, [*(p.name for p in schema.SWEEP), *_SECTIONS], "the sweep file", _axis_hints())
    for key in ("name", "workload"):
        if key not in top:
            raise check.fail(1, f"missing required key {key!r} in the sweep file")
    name = _sweep_name(check, top)
    files: dict[str, str] = {}
    options = _options(check, top, files)
    workload_map = check.mapping(top["workload"], "workload", top.lines["workload"])
    cluster_map = check.mapping(top.get("cluster"), "cluster", top.lines.get("cluster", 1))
    sweep_map = check.mapping(top.get("sweep"), "sweep", top.lines.get("sweep", 1))
    workload = check.section(workload_map, schema.WORKLOAD, "workload", _axis_hints())
    cluster = check.section(cluster_map, schema.CLUSTER, "cluster")
    if cluster["emulate"] is not None:
        cluster["emulate"] = _emulate(check, cluster_map, sweep_map)
    _check_sweep_keys(check, top, workload_map, sweep_map)
    axes = {key: check.axis(schema.param(key), raw, f"sweep.{key}", sweep_map.lines[key])
            for key, raw in sweep_map.items() if key != "compressor"}
    entries = _entries(check, sweep_map, options["baselines"])
    _check_grid(check, top, options, axes, entries, cluster["emulate"], sweep_map)
    # Where each workload setting, sweep axis and cluster key is written, and the workload itself.
    lines = {**{k: workload_map.lines[k] for k in workload_map}, **{k: sweep_map.lines[k] for k in sweep_map},
             **{k: cluster_map.lines[k] for k in cluster_map}, "workload": top.lines["workload"]}
    trials = _expand(check, {**workload, "imports": options["imports"]}, cluster, axes, entries, lines, files)
    return Sweep(name, path, cluster, options["max_concurrent_trials"], trials, options["predictor_inputs"],
                 options["preflight"], lines, files)


def _options(check: Checker, top: LineMapping, files: dict[str, str]) -> dict[str, Any]:
    """The sweep file's own settings (settings.SWEEP but its name), its imports made absolute and imported;
    ``files`` gains the user's files they name."""
    options = {p.name: check.value(p, top[p.name], p.name, top.lines[p.name]) if p.name in top else p.default
               for p in schema.SWEEP if p.name != "name"}
    if options["imports"] is not None:
        # Before anything is checked: a module may register a compressor the sweep names.
        options["imports"] = [_beside(check.path, text, files) for text in options["imports"]]
        try:
            schema.import_modules(options["imports"])
        except ValueError as error:
            raise check.fail(top.lines["imports"], str(error)) from None
    return options


def _check_sweep_keys(check: Checker, top: LineMapping, workload_map: LineMapping, sweep_map: LineMapping) -> None:
    """The grid's axes are axes or workload settings, set in one place, and some section sets a target."""
    hints = {"compressor_params": "write a compressor's parameters in its entry under sweep.compressor"}
    axis_names = [p.name for p in schema.AXES if p.name != "compressor_params"]
    check.keys(sweep_map, axis_names + [p.name for p in schema.WORKLOAD], "sweep", hints)
    if not {"target", "target_accuracy"} & {*workload_map, *sweep_map}:
        raise check.fail(top.lines["workload"], "missing required key 'target' (or its shorthand "
                                                "'target_accuracy') in workload")
    for key in sweep_map:
        if key in workload_map:
            raise check.fail(sweep_map.lines[key], f"{key!r} is set in both workload and sweep; keep one")


def _entries(check: Checker, sweep_map: LineMapping, baselines: bool) -> list[Entry]:
    """The entries of sweep.compressor (fp32 where it has none), after the baselines the sweep adds."""
    raw_entries = sweep_map.get("compressor", "fp32")
    if not isinstance(raw_entries, LineSequence):
        raw_entries = LineSequence([raw_entries], line=sweep_map.lines.get("compressor", sweep_map.line))
    if not raw_entries:
        raise check.fail(raw_entries.line, "sweep.compressor is an empty list")
    entries = [check.compressor_entry(item, f"sweep.compressor[{i}]", raw_entries.lines[i])
               for i, item in enumerate(raw_entries)]
    if "compressor" not in sweep_map:
        entries[0].written = False
    if baselines:  # a baseline the file lists as it is, is not added twice
        plain = {e.compressor for e in entries if not (e.params or e.algorithms or e.workload)}
        entries = [Entry(baseline, written=False) for baseline in schema.BASELINES if baseline not in plain] + entries
    return entries


def _check_grid(check: Checker, top: LineMapping, options: dict[str, Any], axes: dict[str, list[Any]],
                entries: list[Entry], emulate: dict[str, Any] | None, sweep_map: LineMapping) -> None:
    """The grid is no larger than max_trials, runs one trial at a time where it re-shapes the links, and
    asks for no more workers than the emulated cluster holds."""
    size = math.prod(len(v) for v in axes.values()) * sum(
        math.prod(len(v) for v in (*e.params.values(), *e.workload.values())) * max(1, len(e.algorithms))
        for e in entries)
    if size > options["max_trials"]:
        raise check.fail(top.lines.get("max_trials", top.lines.get("sweep", 1)),
                         f"the grid has {size} trials, more than max_trials={options['max_trials']}; "
                         "raise max_trials to run it")
    if len(axes.get("bandwidth", [])) > 1 and options["max_concurrent_trials"] > 1:
        raise check.fail(top.lines["max_concurrent_trials"], "bandwidth is a sweep axis: the links are re-shaped "
                                                             "before each trial, so trials run one at a time; "
                                                             "set max_concurrent_trials: 1")
    slots = emulate["hosts"] * emulate["workers_per_host"] if emulate else None
    for workers in axes.get("num_workers", []):
        if slots is not None and workers > slots:
            raise check.fail(sweep_map.lines["num_workers"],
                             f"num_workers {workers} is more than the {slots} workers the emulated cluster holds "
                             f"(cluster.emulate: {emulate['hosts']} hosts x {emulate['workers_per_host']} "
                             "workers_per_host)")


# ---------------------------------------------------------------- grid expansion and names


def _problem(check: Checker, key: str, message: str, entry: Entry, entries: list[Entry],
             lines: dict[str, int]) -> SweepFileError:
    """A trial's problem with setting ``key``, at the line that gave it its value: the entry's own workload, else
    the workload or a sweep axis. A value no line gave (the default) is reported where another entry sets it
    (the trial is not that entry's), else at the entry the file writes, else (a baseline the sweep adds, the
    default compressor) at the workload, where a setting for every trial is written."""
    if key in entry.workload:
        return check.fail(entry.lines[key], f"{entry.where}.workload.{key}: {message}")
    if key in lines and key != "workload":
        return check.fail(lines[key], f"{key}: {message}")
    elsewhere = next((other for other in entries if key in other.workload), None)
    if elsewhere is not None:
        return check.fail(elsewhere.lines[key], f"{entry.where}: {key}: {message}; {key} is set only in "
                                                f"{elsewhere.where}.workload, for that entry alone: set it under "
                                                "workload (or sweep) for every trial")
    if entry.written:
        return check.fail(entry.line, f"{entry.where}: {key}: {message}")
    return check.fail(lines["workload"], f"{key}: {message}")


def hierarchy_problem(trial: dict[str, Any], workers_per_host: int) -> str | None:
    """Why algorithm hierarchical cannot run a trial's workers on an emulated cluster of ``workers_per_host`` slots
    a host (the sweep's cluster.emulate, or one `lowprec cluster up` made); None if it can.

    Every host must hold the same number of the trial's ranks (``Topology.workers_per_host``). Ray packs a
    trial's workers onto as few hosts of ``workers_per_host`` slots as hold them, the ranks of a host
    consecutive (orchestrator.study.gang), so that holds where num_workers is at most workers_per_host (one
    host) or a multiple of it (full hosts).
    """
    if trial["algorithm"] != "hierarchical":
        return None
    workers, per_host = trial["num_workers"], workers_per_host
    if workers <= per_host or workers % per_host == 0:
        return None
    return (f"num_workers {workers} with algorithm hierarchical: Ray packs a trial's workers onto the emulated "
            f"hosts of workers_per_host={per_host} slots, {workers} as {workers // per_host} full host(s) and one of "
            f"{workers % per_host}, and the hierarchical algorithm needs as many workers on every host: use a "
            f"num_workers that is a multiple of {per_host} (or at most {per_host}), or another algorithm")


def _expand(check: Checker, workload: dict[str, Any], cluster: dict[str, Any], axes: dict[str, list[Any]],
            entries: list[Entry], lines: dict[str, int], files: dict[str, str]) -> list[dict[str, Any]]:
    """The grid's trials, seed by seed; ``lines``: where each workload setting and axis was written, and the
    workload itself; ``files`` gains the user's files they name."""
    top_algorithms = axes.pop("algorithm", [])
    trials, seen, given, taken = [], set(), {}, set()
    for entry in entries:
        for settings, overrides in _entry_settings(check, entry, workload, cluster, axes, top_algorithms):
            for key in ("model", "dataset"):  # a file is named relative to the sweep file
                settings[key] = _beside(check.path, settings[key], files)
            # A sync setting crosses every sync as an algorithm crosses every compressor: a trial keeps
            # those its sync takes; one that no trial takes is the user's mistake, found below.
            given.update((key, entry.lines.get(key, entry.line) if key in overrides else lines.get(key))
                         for key in schema.ALL_SYNC_KEYS if settings.get(key) is not None)
            settings = schema.with_sync_defaults(settings)
            taken.update(key for key in schema.SYNC_KEYS[settings["sync"]])
            _check_trial(check, settings, entry, overrides, entries, lines, cluster["emulate"])
            trial_id = trial_id_of(settings)
            if trial_id in seen:  # a baseline also listed, an axis a compressor ignores
                continue
            seen.add(trial_id)
            trials.append({"trial_id": trial_id, **settings})
    for key, line in given.items():
        if key not in taken:
            takers = [name for name, keys in schema.SYNC_KEYS.items() if key in keys]
            raise check.fail(line or lines["workload"], f"{key} is set but no trial's sync takes it (a setting "
                                                        f"of sync {' and '.join(takers)}): set sync: {takers[-1]}, "
                                                        "or remove it")
    # Seed by seed: every configuration's first seed runs before any second one, so that a disturbance
    # lasting a while shows as a difference between a configuration's runs, not between configurations.
    seeds = list(dict.fromkeys(t["seed"] for t in trials))
    trials.sort(key=lambda t: seeds.index(t["seed"]))
    names = config_labels([{**t, **t["compressor_params"]} for t in trials], schema.TRIAL_KEYS,
                          extra=("num_workers", "seed"))
    return [{"name": name, **trial} for name, trial in zip(names, trials)]


def _entry_settings(check: Checker, entry: Entry, workload: dict[str, Any], cluster: dict[str, Any],
                    axes: dict[str, list[Any]], top_algorithms: list[str]
                    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """The settings (settings.TRIAL_KEYS) of each trial of a compressor entry, with the entry's own workload
    settings among them (``overrides``): its parameters crossed, then its algorithms, its workload settings
    and the sweep's axes."""
    param_axes = list(entry.params.items())
    for param_values in itertools.product(*(values for _, values in param_axes)):
        given = dict(zip((k for k, _ in param_axes), param_values))
        try:  # parameters valid one by one may still clash together
            params = schema.compressor_params_of(entry.compressor, given)
        except ValueError as error:
            raise check.fail(entry.line, f"{entry.where}: {error}") from None
        algorithms = entry.algorithms or [a for a in top_algorithms if a in schema.algorithms(entry.compressor)]
        for algorithm in algorithms or [schema.default_algorithm(entry.compressor)]:
            for override_values in itertools.product(*entry.workload.values()):
                overrides = dict(zip(entry.workload, override_values))
                for axis_values in itertools.product(*axes.values()):
                    settings = {
                        "compressor": entry.compressor,
                        "compressor_params": params,
                        "algorithm": algorithm,
                        "num_workers": schema.param("num_workers").default,
                        "seed": schema.param("seed").default,
                        **{k: cluster[k] for k in ("use_gpu", "backend")},
                        "bandwidth": cluster["emulate"]["bandwidth"] if cluster["emulate"] else None,
                        **workload,
                        **dict(zip(axes, axis_values)),
                        **overrides,
                    }
                    yield {key: settings[key] for key in schema.TRIAL_KEYS}, overrides


def _check_trial(check: Checker, settings: dict[str, Any], entry: Entry, overrides: dict[str, Any],
                 entries: list[Entry], lines: dict[str, int], emulate: dict[str, Any] | None) -> None:
    """A trial's data_dir is a folder here (``~`` expanded in ``settings``), its settings agree with each
    other, and the emulated cluster can run its algorithm."""
    data_dir = settings["data_dir"]
    if data_dir is not None:
        # Trials run elsewhere: they get ~ expanded here. A relative folder stays as written (the runner joins
        # it to this folder), so trial ids do not depend on where the sweep runs.
        data_dir = settings["data_dir"] = os.path.expanduser(data_dir)
        if not Path(data_dir).is_dir():  # written in the entry's workload, or the file's
            line = entry.lines["data_dir"] if "data_dir" in overrides else lines["data_dir"]
            raise check.fail(line, f"data_dir {short_repr(data_dir, _PATH_LIMIT)} is not a folder here "
                                   f"(relative to {Path.cwd()})")
    for key, message in schema.relation_problems(settings):
        raise _problem(check, key, message, entry, entries, lines)
    problem = emulate and hierarchy_problem(settings, emulate["workers_per_host"])
    if problem:
        raise check.fail(lines.get("num_workers", entry.line), problem)
