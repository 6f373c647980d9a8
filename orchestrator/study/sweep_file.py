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

import difflib
import functools
import hashlib
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from compressors.core.params import Param, short_repr

from . import settings as schema
from .labels import config_labels
from .records import MARKER, kept_code

__all__ = ["SweepFileError", "Sweep", "hierarchy_problem", "load_sweep", "settings_of", "trial_id_of"]


class SweepFileError(ValueError):
    """A sweep-file problem, located: ``path:line: message``."""

    def __init__(self, path: str | os.PathLike, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path = str(path)
        self.line = line


# ---------------------------------------------------------------- YAML with line numbers


class _Mapping(dict):
    """A YAML mapping that remembers its own line and each key's line (1-based)."""

    def __init__(self, *args: Any, line: int = 1, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.line = line
        self.lines: dict[Any, int] = {key: line for key in self}


class _Sequence(list):
    """A YAML sequence that remembers its own line and each item's line (1-based)."""

    def __init__(self, items: Iterable[Any] = (), line: int = 1):
        super().__init__(items)
        self.line = line
        self.lines: list[int] = [line] * len(self)


class _LineLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> _Mapping:
        own = sum(key.tag != "tag:yaml.org,2002:merge" for key, _ in node.value)
        self.flatten_mapping(node)  # merge keys ('<<'): their pairs now come first
        merged = len(node.value) - own
        mapping = _Mapping(line=node.start_mark.line + 1)
        written: set[Any] = set()  # keys written in this mapping itself (they override merged ones)
        for i, (key_node, value_node) in enumerate(node.value):
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise SweepFileError(self.name, line, "a key must be a plain name, not a list or mapping")
            key = self.construct_object(key_node, deep=True)
            if i >= merged:
                if key in written:
                    raise SweepFileError(self.name, line, f"duplicate key {short_repr(key)}")
                written.add(key)
            mapping.lines[key] = line
            mapping[key] = self.construct_object(value_node, deep=True)
        return mapping

    def construct_sequence(self, node: yaml.SequenceNode, deep: bool = False) -> _Sequence:
        sequence = _Sequence((self.construct_object(child, deep=True) for child in node.value),
                             line=node.start_mark.line + 1)
        sequence.lines = [child.start_mark.line + 1 for child in node.value]
        return sequence


# SafeLoader builds maps and lists in two steps (yield an empty one, fill it later);
# building them in one step keeps our subclasses and their line numbers.
_LineLoader.add_constructor("tag:yaml.org,2002:map", lambda loader, node: loader.construct_mapping(node))
_LineLoader.add_constructor("tag:yaml.org,2002:seq", lambda loader, node: loader.construct_sequence(node))


def _read_yaml(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise SweepFileError(path, 1, f"cannot read sweep file: {error.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[:error.start].count(b"\n") + 1
        raise SweepFileError(path, line, f"not UTF-8 text: byte {raw[error.start]:#04x} at offset {error.start}") from None
    loader = None
    try:
        loader = _LineLoader(text)  # the reader checks for control characters here
        loader.name = str(path)
        return loader.get_single_data()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise SweepFileError(path, line, f"invalid YAML: {error.problem or error}") from None
    except yaml.reader.ReaderError as error:  # a control character, found before any parsing
        line = text[:error.position].count("\n") + 1
        raise SweepFileError(path, line, f"invalid YAML: character {error.character!r} is not allowed") from None
    except RecursionError:
        raise SweepFileError(path, 1, "invalid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


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


@dataclass
class _Entry:
    """One compressor entry of the sweep: its value lists and where it was written."""

    compressor: str
    params: dict[str, list[Any]] = field(default_factory=dict)
    algorithms: list[Any] = field(default_factory=list)
    workload: dict[str, list[Any]] = field(default_factory=dict)
    where: str = "baselines"
    line: int = 1
    # The line of each of its workload settings.
    lines: dict[str, int] = field(default_factory=dict)
    # Whether the file writes it (not a baseline the sweep adds, nor the default compressor of a file without one).
    written: bool = True


class _Checker:
    """Validation helpers that know the file, so every error carries file and line."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, line: int, message: str) -> SweepFileError:
        return SweepFileError(self.path, line, message)

    def mapping(self, value: Any, where: str, line: int) -> _Mapping:
        if value is None:  # an empty section ('cluster:' with nothing under it)
            return _Mapping(line=line)
        if not isinstance(value, _Mapping):
            raise self.fail(line, f"{where} must be a mapping of keys to values, got {_short(value)}")
        return value

    def keys(self, mapping: _Mapping, valid: Iterable[str], where: str,
             hints: dict[str, str] | None = None) -> None:
        valid = list(valid)
        for key, line in mapping.lines.items():
            if key in valid:
                continue
            if hints and key in hints:
                raise self.fail(line, f"key {_short(key)} is not allowed in {where}: {hints[key]}")
            close = difflib.get_close_matches(str(key), valid, n=1)
            suggestion = f" (did you mean {close[0]!r}?)" if close else f" (valid: {', '.join(valid)})"
            raise self.fail(line, f"unknown key {_short(key)} in {where}{suggestion}")

    def value(self, param: Param, value: Any, where: str, line: int) -> Any:
        if value is None and param.name in schema.TARGET_KEYS:  # null: the training loop's "no target"
            raise self.fail(line, f"{where} is null: a sweep needs a target, target: {{metric: NAME, value: V}} "
                                  "or target_accuracy: V, with a value")
        value = param.read(value)
        problem = param.problem(value)
        if problem:
            raise self.fail(line, f"{where} {problem}, got {_short(value)}")
        return param.check(where, value)

    def section(self, mapping: _Mapping, params: Iterable[Param], where: str,
                hints: dict[str, str] | None = None) -> dict[str, Any]:
        params = list(params)
        self.keys(mapping, [p.name for p in params], where, hints)
        return {
            p.name: self.value(p, mapping[p.name], f"{where}.{p.name}", mapping.lines[p.name])
            if p.name in mapping else p.default
            for p in params
        }

    def axis(self, param: Param, raw: Any, where: str, line: int) -> list[Any]:
        """A grid axis: a list of values, or one value (a list-valued setting needs a list of lists)."""
        if isinstance(raw, _Sequence):
            if not raw:
                raise self.fail(line, f"{where} is an empty list")
            return [self.value(param, v, f"{where}[{i}]", raw.lines[i]) for i, v in enumerate(raw)]
        return [self.value(param, raw, where, line)]

    def compressor_entry(self, raw: Any, where: str, line: int) -> _Entry:
        import compressors

        entry = _Mapping({"name": raw}, line=line) if isinstance(raw, str) else self.mapping(raw, where, line)
        names = compressors.names()  # with those the sweep's imports registered
        if "name" not in entry:
            raise self.fail(entry.line, f"{where} needs a 'name' (one of {', '.join(names)})")
        name = entry["name"]
        if name not in names:
            close = difflib.get_close_matches(str(name), names, n=1)
            suggestion = f" (did you mean {close[0]!r}?)" if close else ""
            raise self.fail(entry.lines["name"], f"unknown compressor {_short(name)} in {where}{suggestion}; "
                                                 f"valid: {', '.join(names)}")
        declared = {p.name: p for p in compressors.params_of(name) if p.name != "seed"}
        hints = {p: f"compressor {name!r} has no parameter {p!r}" for p in schema.compressor_param_names()
                 if p not in declared}
        hints["seed"] = "the seed is a sweep axis"
        workload_keys = {p.name for p in schema.WORKLOAD}
        for key in workload_keys - set(declared):
            hints[key] = f"a workload setting; write it under '{where}.workload'"
        valid_algorithms = schema.algorithms(name)
        if not valid_algorithms:
            hints["algorithm"] = f"{name!r} runs its own communication hook"
        valid = ["name", *declared, *(["algorithm"] if valid_algorithms else []), "workload"]
        self.keys(entry, valid, where, hints)
        out = _Entry(name, where=where, line=entry.line)
        for key, param in declared.items():
            if key in entry:
                out.params[key] = self.axis(param, entry[key], f"{where}.{key}", entry.lines[key])
        if "algorithm" in entry:
            choice = Param("algorithm", None, str, choices=valid_algorithms)
            out.algorithms = self.axis(choice, entry["algorithm"], f"{where}.algorithm", entry.lines["algorithm"])
        if "workload" in entry:
            overrides = self.mapping(entry["workload"], f"{where}.workload", entry.lines["workload"])
            self.keys(overrides, [p.name for p in schema.WORKLOAD], f"{where}.workload")
            out.workload = {key: self.axis(schema.param(key), raw, f"{where}.workload.{key}", overrides.lines[key])
                            for key, raw in overrides.items()}
            out.lines = {key: overrides.lines[key] for key in overrides}
        return out


_short = short_repr  # no message grows with the input


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


def _emulate(check: _Checker, cluster_map: _Mapping, sweep_map: _Mapping) -> dict[str, Any]:
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

def _sweep_name(check: _Checker, top: _Mapping) -> str:
    name = top.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise check.fail(top.lines.get("name", 1), f"name {schema.param('name').doc}, got {_short(name)}")
    return name


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read, validate and expand a sweep file, or raise SweepFileError (file:line: message)."""
    path = Path(path)
    check = _Checker(path)
    top = check.mapping(_read_yaml(path), "the sweep file", 1)
    # A package beside the sweep file (`mylab.models:fn`) is found wherever the sweep runs from; installed
    # packages come first.
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)
    axis_names = [p.name for p in schema.AXES]
    axis_hint = {key: "it is a grid axis; put it under 'sweep'" for key in axis_names}
    check.keys(top, [*(p.name for p in schema.SWEEP), *_SECTIONS], "the sweep file", axis_hint)
    for key in ("name", "workload"):
        if key not in top:
            raise check.fail(1, f"missing required key {key!r} in the sweep file")
    name = _sweep_name(check, top)
    options = {p.name: top[p.name] for p in schema.SWEEP if p.name != "name" and p.name in top}
    top_settings = {p.name: (check.value(p, options[p.name], p.name, top.lines[p.name]) if p.name in options
                             else p.default) for p in schema.SWEEP if p.name != "name"}
    files: dict[str, str] = {}
    if top_settings["imports"] is not None:
        # Before anything is checked: a module may register a compressor the sweep names.
        top_settings["imports"] = [_beside(path, text, files) for text in top_settings["imports"]]
        try:
            schema.import_modules(top_settings["imports"])
        except ValueError as error:
            raise check.fail(top.lines["imports"], str(error)) from None
    workload_map = check.mapping(top["workload"], "workload", top.lines["workload"])
    cluster_map = check.mapping(top.get("cluster"), "cluster", top.lines.get("cluster", 1))
    sweep_map = check.mapping(top.get("sweep"), "sweep", top.lines.get("sweep", 1))
    workload = check.section(workload_map, schema.WORKLOAD, "workload", axis_hint)
    cluster = check.section(cluster_map, schema.CLUSTER, "cluster")
    if cluster["emulate"] is not None:
        cluster["emulate"] = _emulate(check, cluster_map, sweep_map)
    sweep_hints = {"compressor_params": "write a compressor's parameters in its entry under sweep.compressor"}
    check.keys(sweep_map, [k for k in axis_names if k != "compressor_params"] + [p.name for p in schema.WORKLOAD],
               "sweep", sweep_hints)
    if not {"target", "target_accuracy"} & {*workload_map, *sweep_map}:
        raise check.fail(top.lines["workload"], "missing required key 'target' (or its shorthand "
                                                "'target_accuracy') in workload")
    for key in sweep_map:
        if key in workload_map:
            raise check.fail(sweep_map.lines[key], f"{key!r} is set in both workload and sweep; keep one")

    axes = {key: check.axis(schema.param(key), raw, f"sweep.{key}", sweep_map.lines[key])
            for key, raw in sweep_map.items() if key != "compressor"}
    raw_entries = sweep_map.get("compressor", "fp32")
    if not isinstance(raw_entries, _Sequence):
        raw_entries = _Sequence([raw_entries], line=sweep_map.lines.get("compressor", sweep_map.line))
    if not raw_entries:
        raise check.fail(raw_entries.line, "sweep.compressor is an empty list")
    entries = [check.compressor_entry(item, f"sweep.compressor[{i}]", raw_entries.lines[i])
               for i, item in enumerate(raw_entries)]
    if "compressor" not in sweep_map:
        entries[0].written = False
    if top_settings["baselines"]:  # a baseline the file lists as it is, is not added twice
        plain = {e.compressor for e in entries if not (e.params or e.algorithms or e.workload)}
        entries = [_Entry(baseline, written=False) for baseline in schema.BASELINES if baseline not in plain] + entries

    lines = {**{k: workload_map.lines[k] for k in workload_map}, **{k: sweep_map.lines[k] for k in sweep_map},
             **{k: cluster_map.lines[k] for k in cluster_map}}
    size = math.prod(len(v) for v in axes.values()) * sum(
        math.prod(len(v) for v in (*e.params.values(), *e.workload.values())) * max(1, len(e.algorithms))
        for e in entries)
    if size > top_settings["max_trials"]:
        raise check.fail(top.lines.get("max_trials", top.lines.get("sweep", 1)),
                         f"the grid has {size} trials, more than max_trials={top_settings['max_trials']}; "
                         "raise max_trials to run it")
    bandwidths = axes.get("bandwidth", [])
    if len(bandwidths) > 1 and top_settings["max_concurrent_trials"] > 1:
        raise check.fail(top.lines["max_concurrent_trials"], "bandwidth is a sweep axis: the links are re-shaped "
                                                             "before each trial, so trials run one at a time; "
                                                             "set max_concurrent_trials: 1")
    emulate = cluster["emulate"]
    slots = emulate["hosts"] * emulate["workers_per_host"] if emulate else None
    for workers in axes.get("num_workers", []):
        if slots is not None and workers > slots:
            raise check.fail(sweep_map.lines["num_workers"],
                             f"num_workers {workers} is more than the {slots} workers the emulated cluster holds "
                             f"(cluster.emulate: {emulate['hosts']} hosts x {emulate['workers_per_host']} "
                             "workers_per_host)")
    trials = _expand(check, {**workload, "imports": top_settings["imports"]}, cluster, axes, entries,
                     {**lines, "workload": top.lines["workload"]}, files)
    return Sweep(name, path, cluster, top_settings["max_concurrent_trials"], trials, top_settings["predictor_inputs"],
                 top_settings["preflight"], {**lines, "workload": top.lines["workload"]}, files)


# ---------------------------------------------------------------- grid expansion and names


def _problem(check: _Checker, key: str, message: str, entry: _Entry, entries: list[_Entry],
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


def _expand(check: _Checker, workload: dict[str, Any], cluster: dict[str, Any], axes: dict[str, list[Any]],
            entries: list[_Entry], lines: dict[str, int], files: dict[str, str]) -> list[dict[str, Any]]:
    """The grid's trials; ``lines``: where each workload setting and axis was written, and the workload itself;
    ``files`` gains the user's files they name."""
    top_algorithms = axes.pop("algorithm", [])
    trials, seen = [], set()
    for entry in entries:
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
                        settings = {key: settings[key] for key in schema.TRIAL_KEYS}
                        for key in ("model", "dataset"):  # a file is named relative to the sweep file
                            settings[key] = _beside(check.path, settings[key], files)
                        data_dir = settings["data_dir"]
                        if data_dir is not None:
                            # Trials run elsewhere: they get ~ expanded here. A relative folder stays as
                            # written (the runner joins it to this folder), so trial ids do not depend on
                            # where the sweep runs.
                            data_dir = settings["data_dir"] = os.path.expanduser(data_dir)
                            if not Path(data_dir).is_dir():  # written in the entry's workload, or the file's
                                line = entry.lines["data_dir"] if "data_dir" in overrides else lines["data_dir"]
                                raise check.fail(line, f"data_dir {short_repr(data_dir, _PATH_LIMIT)} is not a folder here "
                                                       f"(relative to {Path.cwd()})")
                        for key, message in schema.relation_problems(settings):
                            raise _problem(check, key, message, entry, entries, lines)
                        problem = cluster["emulate"] and hierarchy_problem(settings,
                                                                           cluster["emulate"]["workers_per_host"])
                        if problem:
                            raise check.fail(lines.get("num_workers", entry.line), problem)
                        trial_id = trial_id_of(settings)
                        if trial_id in seen:  # a baseline also listed, an axis a compressor ignores
                            continue
                        seen.add(trial_id)
                        trials.append({"trial_id": trial_id, **settings})
    names = config_labels([{**t, **t["compressor_params"]} for t in trials], schema.TRIAL_KEYS,
                          extra=("num_workers", "seed"))
    return [{"name": name, **trial} for name, trial in zip(names, trials)]
