"""Sweep files: load a YAML study, validate every key, expand it into trials.

A sweep file has these top-level keys (``name``, ``workload`` and a
``target_accuracy`` required)::

    name: quickstart            # letters, digits, '-', '_', '.'; names the results folder
    workload: {...}             # flat training-loop settings: WORKLOAD_OPTIONS
    cluster: {...}              # CLUSTER_OPTIONS: use_gpu, backend, cpus_per_worker, ...
    baselines: true             # add fp32 ('none') and fp16 to the compressors unless false
    max_concurrent_trials: 1    # trials that run at the same time (timing studies: 1)
    sweep:                      # grid axes; a scalar is a one-value axis
      num_workers: [1, 2]
      seed: [0, 1]
      lr: [0.05, 0.1]           # any workload option may be an axis instead of a setting
      algorithm: [sra, allgather]   # used by the compressors that support it, others keep theirs
      compressor:
        - none                  # a name, or a mapping with 'name' plus value lists that are
        - {name: qsgd, bits: [2, 4], bucket: 512}   # crossed within this entry only: its
                                                    # parameters, 'algorithm', and workload
                                                    # options overriding the others for it

Every problem is a ConfigError ``FILE:LINE: message`` naming the key, raised
before Ray is started (this module never imports Ray). The valid names come
from the ``compressors`` and ``workloads`` packages, so a sweep file cannot name
anything the training loop would reject later.

A trial is a flat dict: ``name`` (readable: sweep, compressor, the parameters
written in its entry, the axes that vary, ``w<num_workers>``, ``s<seed>``),
``trial_id`` (a hash of the settings, stable across runs so ``--resume``
recognises finished trials) and every training-loop setting, in the order
compressor, its parameters (None where the compressor has no such parameter),
algorithm, num_workers, seed, use_gpu, backend, then the workload options.
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "CLUSTER_OPTIONS",
    "ConfigError",
    "Sweep",
    "WORKLOAD_OPTIONS",
    "compressor_params",
    "load_sweep",
    "settings_of",
]


class ConfigError(ValueError):
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
        self.flatten_mapping(node)  # merge keys ('<<'), as SafeLoader does
        mapping = _Mapping(line=node.start_mark.line + 1)
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in mapping.lines:
                raise ConfigError(self.name, key_node.start_mark.line + 1, f"duplicate key {key!r}")
            mapping.lines[key] = key_node.start_mark.line + 1
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
        text = path.read_text()
    except OSError as error:
        raise ConfigError(path, 1, f"cannot read sweep file: {error.strerror}") from None
    loader = _LineLoader(text)
    loader.name = str(path)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise ConfigError(path, line, f"invalid YAML: {error.problem or error}") from None
    finally:
        loader.dispose()


# ---------------------------------------------------------------- option schema

Check = Callable[[Any], "str | None"]  # returns what is wrong, or None


@dataclass(frozen=True)
class Option:
    default: Any
    check: Check
    real: bool = False  # a number stored as float, so 1 and 1.0 give the same trial_id


def _integer(minimum: int, nullable: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer >= {minimum}" + (" or null" if nullable else "")
        return None if value >= minimum else f"must be >= {minimum}"

    return check


def _number(low: float, high: float = math.inf, low_open: bool = False, high_open: bool = True) -> Check:
    text = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"

    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number in {text}"
        too_low = value <= low if low_open else value < low
        too_high = value >= high if high_open else value > high
        return f"must be in {text}" if too_low or too_high else None

    return check


def _choice(*choices: str) -> Check:
    return lambda value: None if value in choices else f"must be one of {', '.join(choices)}"


def _text(nullable: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and nullable:
            return None
        return None if isinstance(value, str) and value else "must be a non-empty string"

    return check


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _shape(value: Any) -> str | None:
    if value is None:
        return None
    ok = isinstance(value, list) and value and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value
    )
    return None if ok else "must be a list of positive integers (e.g. [1, 28, 28]) or null"


def _registered(kind: str) -> Check:
    """A dataset or model name known to the workloads package (imported only when checked)."""

    def check(value: Any) -> str | None:
        import workloads

        names = workloads.DATASET_NAMES if kind == "dataset" else workloads.MODEL_NAMES
        return None if value in names else f"must be one of {', '.join(names)}"

    return check


def _sweep_name(value: Any) -> str | None:
    ok = isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", value)
    return None if ok else "must be a name of letters, digits, '-', '_' or '.'"


# The flat training-loop settings (orchestrator.train_loop). None means "the
# workload's own default": workloads treat a None option as not given.
WORKLOAD_OPTIONS: dict[str, Option] = {
    "dataset": Option("mnist", _registered("dataset")),
    "data_dir": Option(None, _text(nullable=True)),
    "model": Option("mlp", _registered("model")),
    "width": Option(None, _integer(1, nullable=True)),
    "depth": Option(None, _integer(0, nullable=True)),  # mlp: 0 = a linear model
    "input_shape": Option(None, _shape),
    "num_classes": Option(None, _integer(2, nullable=True)),
    "num_samples": Option(None, _integer(1, nullable=True)),
    "epochs": Option(1, _integer(1)),
    "batch_size": Option(64, _integer(1)),
    "optimizer": Option("momentum", _choice("sgd", "momentum", "adam")),
    "lr": Option(0.05, _number(0, low_open=True), real=True),
    "momentum": Option(0.9, _number(0, 1), real=True),
    "weight_decay": Option(0.0, _number(0), real=True),
    "warmup_epochs": Option(0, _integer(0)),
    "target_accuracy": Option(None, _number(0, 1, low_open=True, high_open=False), real=True),
    "max_steps_per_epoch": Option(None, _integer(1, nullable=True)),
    "min_compress_numel": Option(1024, _integer(0)),
    # Test hooks the training loop honours: raise at this epoch / inject a NaN at this step.
    "fail_at_epoch": Option(None, _integer(1, nullable=True)),
    "force_nan_at_step": Option(None, _integer(0, nullable=True)),
}

# Settings that are only grid axes ('compressor' aside).
AXIS_OPTIONS: dict[str, Option] = {
    "num_workers": Option(1, _integer(1)),
    "seed": Option(0, _integer(0)),
    "algorithm": Option(None, _choice("allreduce", "allgather", "sra")),
}

# Placement of trials; use_gpu and backend are training-loop settings too.
CLUSTER_OPTIONS: dict[str, Option] = {
    "use_gpu": Option(False, _boolean),
    "backend": Option("auto", _choice("auto", "gloo", "nccl")),
    "cpus_per_worker": Option(1.0, _number(0, low_open=True), real=True),
    "gpus_per_worker": Option(1.0, _number(0, low_open=True), real=True),
    "max_failures": Option(0, _integer(-1)),  # Ray Train worker-group retries; -1 = forever
}
_TRAIN_CLUSTER_KEYS = ("use_gpu", "backend")

_TOP_LEVEL_OPTIONS: dict[str, Option] = {
    "name": Option(None, _sweep_name),
    "workload": Option(None, lambda value: None),  # sections are checked key by key
    "cluster": Option(None, lambda value: None),
    "baselines": Option(True, _boolean),
    "max_concurrent_trials": Option(1, _integer(1)),
    "sweep": Option(None, lambda value: None),
}

_BASELINES = ("none", "fp16")


def _algorithms(compressor: str) -> tuple[str, ...]:
    """What a sweep may choose: the baselines stay on their native all_reduce, and
    powersgd has nothing to choose (its hook is its algorithm)."""
    import compressors

    if compressor in compressors.NATIVE:
        return ("allreduce",)
    if compressor == "powersgd":
        return ()
    return compressors.algorithms(compressor)


def _default_algorithm(compressor: str) -> str | None:
    import compressors

    return compressors.default_algorithm(compressor) if _algorithms(compressor) else None


@functools.cache
def compressor_params() -> tuple[str, ...]:
    """Every compressor parameter name (bits, bucket, ...): each is a setting of every trial."""
    import compressors

    names = [p for name in compressors.NAMES for p in compressors.check_params(name) if p != "seed"]
    return tuple(dict.fromkeys(names))


# ---------------------------------------------------------------- the validated study


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file and its expanded trials."""

    name: str
    path: Path
    cluster: dict[str, Any]
    max_concurrent_trials: int
    trials: list[dict[str, Any]]


def settings_of(trial: dict[str, Any]) -> dict[str, Any]:
    """The training-loop config of a trial: everything but its ``name`` and ``trial_id``."""
    return {key: value for key, value in trial.items() if key not in ("name", "trial_id")}


def trial_id_of(settings: dict[str, Any]) -> str:
    blob = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass
class _Entry:
    """One compressor entry of the sweep: its value lists and where it was written."""

    compressor: str
    axes: dict[str, list[Any]] = field(default_factory=dict)  # params, 'algorithm', overrides
    where: str = "baselines"
    line: int = 1


class _Checker:
    """Validation helpers that know the file, so every error carries file and line."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, line: int, message: str) -> ConfigError:
        return ConfigError(self.path, line, message)

    def mapping(self, value: Any, where: str, line: int) -> _Mapping:
        if value is None:  # an empty section ('cluster:' with nothing under it)
            return _Mapping(line=line)
        if not isinstance(value, _Mapping):
            raise self.fail(line, f"{where} must be a mapping of keys to values, got {value!r}")
        return value

    def keys(self, mapping: _Mapping, valid: Iterable[str], where: str,
             hints: dict[str, str] | None = None) -> None:
        valid = list(valid)
        for key, line in mapping.lines.items():
            if key in valid:
                continue
            if hints and key in hints:
                raise self.fail(line, f"key {key!r} is not allowed in {where}: {hints[key]}")
            close = difflib.get_close_matches(str(key), valid, n=1)
            suggestion = f" (did you mean {close[0]!r}?)" if close else f" (valid: {', '.join(valid)})"
            raise self.fail(line, f"unknown key {key!r} in {where}{suggestion}")

    def value(self, option: Option, value: Any, where: str, line: int) -> Any:
        problem = option.check(value)
        if problem:
            raise self.fail(line, f"{where} {problem}, got {value!r}")
        return float(value) if option.real and value is not None else value

    def section(self, mapping: _Mapping, options: dict[str, Option], where: str,
                hints: dict[str, str] | None = None) -> dict[str, Any]:
        self.keys(mapping, options, where, hints)
        return {
            key: self.value(option, mapping[key], f"{where}.{key}", mapping.lines[key])
            if key in mapping else option.default
            for key, option in options.items()
        }

    def axis(self, option: Option, raw: Any, where: str, line: int) -> list[Any]:
        """A grid axis: a list of values, or one value (a list-valued option needs a list of lists)."""
        if isinstance(raw, _Sequence):
            if not raw:
                raise self.fail(line, f"{where} is an empty list")
            return [self.value(option, v, f"{where}[{i}]", raw.lines[i]) for i, v in enumerate(raw)]
        return [self.value(option, raw, where, line)]

    def compressor_entry(self, raw: Any, where: str, line: int) -> _Entry:
        import compressors

        entry = _Mapping({"name": raw}, line=line) if isinstance(raw, str) else self.mapping(raw, where, line)
        if "name" not in entry:
            raise self.fail(entry.line, f"{where} needs a 'name' (one of {', '.join(compressors.NAMES)})")
        name = entry["name"]
        if name not in compressors.NAMES:
            close = difflib.get_close_matches(str(name), compressors.NAMES, n=1)
            suggestion = f" (did you mean {close[0]!r}?)" if close else ""
            raise self.fail(entry.lines["name"], f"unknown compressor {name!r} in {where}{suggestion}; "
                                                 f"valid: {', '.join(compressors.NAMES)}")
        params = [p for p in compressors.check_params(name) if p != "seed"]
        hints = {p: f"compressor {name!r} has no parameter {p!r}" for p in compressor_params() if p not in params}
        hints["seed"] = "the seed is a sweep axis"
        if not _algorithms(name):
            hints["algorithm"] = f"{name!r} runs its own communication hook"
        valid = ["name", *params, *(["algorithm"] if _algorithms(name) else []), *WORKLOAD_OPTIONS]
        self.keys(entry, valid, where, hints)
        axes = {}
        for key in entry:
            if key == "name":
                continue
            if key in WORKLOAD_OPTIONS:
                option = WORKLOAD_OPTIONS[key]
            elif key == "algorithm":
                option = Option(None, _choice(*_algorithms(name)))
            else:
                option = Option(None, _parameter_check(name, key))
            axes[key] = self.axis(option, entry[key], f"{where}.{key}", entry.lines[key])
        return _Entry(name, axes, where, entry.line)


def _parameter_check(compressor: str, key: str) -> Check:
    import compressors

    def check(value: Any) -> str | None:
        try:
            compressors.check_params(compressor, **{key: value})
        except ValueError as error:
            return f"is invalid ({error})"
        return None

    return check


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read, validate and expand a sweep file, or raise ConfigError (file:line: message)."""
    path = Path(path)
    check = _Checker(path)
    top = check.mapping(_read_yaml(path), "the sweep file", 1)
    axis_hint = {key: "it is a grid axis; put it under 'sweep'" for key in (*AXIS_OPTIONS, "compressor")}
    head = check.section(top, _TOP_LEVEL_OPTIONS, "the sweep file", axis_hint)
    for key in ("name", "workload"):
        if key not in top:
            raise check.fail(1, f"missing required key {key!r} in the sweep file")
    workload_map = check.mapping(top["workload"], "workload", top.lines["workload"])
    cluster_map = check.mapping(top.get("cluster"), "cluster", top.lines.get("cluster", 1))
    sweep_map = check.mapping(top.get("sweep"), "sweep", top.lines.get("sweep", 1))
    workload = check.section(workload_map, WORKLOAD_OPTIONS, "workload", axis_hint)
    cluster = check.section(cluster_map, CLUSTER_OPTIONS, "cluster")
    check.keys(sweep_map, [*AXIS_OPTIONS, "compressor", *WORKLOAD_OPTIONS], "sweep")
    if "target_accuracy" not in workload_map and "target_accuracy" not in sweep_map:
        raise check.fail(top.lines["workload"], "missing required key 'target_accuracy' in workload")
    for key in sweep_map:
        if key in workload_map:
            raise check.fail(sweep_map.lines[key], f"{key!r} is set in both workload and sweep; keep one")

    axes = {
        key: check.axis(AXIS_OPTIONS.get(key) or WORKLOAD_OPTIONS[key], raw, f"sweep.{key}", sweep_map.lines[key])
        for key, raw in sweep_map.items() if key != "compressor"
    }
    raw_entries = sweep_map.get("compressor", "none")
    if not isinstance(raw_entries, _Sequence):
        raw_entries = _Sequence([raw_entries], line=sweep_map.lines.get("compressor", sweep_map.line))
    if not raw_entries:
        raise check.fail(raw_entries.line, "sweep.compressor is an empty list")
    entries = [check.compressor_entry(item, f"sweep.compressor[{i}]", raw_entries.lines[i])
               for i, item in enumerate(raw_entries)]
    if head["baselines"]:  # duplicates of entries the file already has are dropped in _expand
        entries = [_Entry(name) for name in _BASELINES] + entries

    trials = _expand(check, head["name"], workload, cluster, axes, entries)
    return Sweep(head["name"], path, cluster, head["max_concurrent_trials"], trials)


# ---------------------------------------------------------------- grid expansion and names


def _expand(check: _Checker, sweep_name: str, workload: dict[str, Any], cluster: dict[str, Any],
            axes: dict[str, list[Any]], entries: list[_Entry]) -> list[dict[str, Any]]:
    import compressors

    top_algorithms = axes.pop("algorithm", [])
    # Axes with several values go into every name (an entry's own overrides go in its part).
    named_axes = [key for key, values in axes.items() if len(values) > 1 and key not in ("num_workers", "seed")]
    trials, seen = [], set()
    for entry in entries:
        for values in itertools.product(*entry.axes.values()):
            chosen = dict(zip(entry.axes, values))
            given = {k: v for k, v in chosen.items() if k not in WORKLOAD_OPTIONS and k != "algorithm"}
            try:  # parameters valid one by one may still clash together
                params = compressors.check_params(entry.compressor, **given)
            except ValueError as error:
                raise check.fail(entry.line, f"{entry.where}: {error}") from None
            if "algorithm" in chosen:
                algorithms = [chosen["algorithm"]]
            else:
                algorithms = [a for a in top_algorithms if a in _algorithms(entry.compressor)]
            for algorithm in algorithms or [_default_algorithm(entry.compressor)]:
                for axis_values in itertools.product(*axes.values()):
                    settings = {
                        "compressor": entry.compressor,
                        **{p: params.get(p) for p in compressor_params()},
                        "algorithm": algorithm,
                        "num_workers": AXIS_OPTIONS["num_workers"].default,
                        "seed": AXIS_OPTIONS["seed"].default,
                        **{k: cluster[k] for k in _TRAIN_CLUSTER_KEYS},
                        **workload,
                        **dict(zip(axes, axis_values)),
                        **{k: v for k, v in chosen.items() if k in WORKLOAD_OPTIONS},
                    }
                    trial_id = trial_id_of(settings)
                    if trial_id in seen:  # a baseline also listed, an axis a compressor ignores
                        continue
                    seen.add(trial_id)
                    parts = [sweep_name, entry.compressor]
                    parts += [f"{k}{_fmt(v)}" for k, v in chosen.items() if k != "algorithm"]
                    if algorithms:  # the algorithm was chosen in the file, not defaulted
                        parts.append(str(algorithm))
                    parts += [f"{k}{_fmt(settings[k])}" for k in named_axes if k not in chosen]
                    parts += [f"w{settings['num_workers']}", f"s{settings['seed']}"]
                    trials.append({"name": "-".join(parts), "trial_id": trial_id, **settings})
    return trials


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, list):
        return "x".join(str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)
