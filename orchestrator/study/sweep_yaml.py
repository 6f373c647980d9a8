"""A sweep file's YAML, read with the line of every key and item, and checked value by value.

Every problem is a SweepFileError ``FILE:LINE: message`` naming the key: ``read_yaml`` locates the YAML's
own errors, a ``Checker`` those of the values it checks against their declarations
(orchestrator.study.settings). No message grows with the input: values are shown cut (``short_repr``).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from compressors.core.params import Param, short_repr

from . import settings as schema


class SweepFileError(ValueError):
    """A sweep-file problem, located: ``path:line: message``."""

    def __init__(self, path: str | os.PathLike, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}")
        self.path = str(path)
        self.line = line


class LineMapping(dict):
    """A YAML mapping that remembers its own line and each key's line (1-based)."""

    def __init__(self, *args: Any, line: int = 1, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.line = line
        self.lines: dict[Any, int] = {key: line for key in self}


class LineSequence(list):
    """A YAML sequence that remembers its own line and each item's line (1-based)."""

    def __init__(self, items: Iterable[Any] = (), line: int = 1):
        super().__init__(items)
        self.line = line
        self.lines: list[int] = [line] * len(self)


class _LineLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> LineMapping:
        own = sum(key.tag != "tag:yaml.org,2002:merge" for key, _ in node.value)
        self.flatten_mapping(node)  # merge keys ('<<'): their pairs now come first
        merged = len(node.value) - own
        mapping = LineMapping(line=node.start_mark.line + 1)
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

    def construct_sequence(self, node: yaml.SequenceNode, deep: bool = False) -> LineSequence:
        sequence = LineSequence((self.construct_object(child, deep=True) for child in node.value),
                                line=node.start_mark.line + 1)
        sequence.lines = [child.start_mark.line + 1 for child in node.value]
        return sequence


# SafeLoader builds maps and lists in two steps (yield an empty one, fill it later);
# building them in one step keeps our subclasses and their line numbers.
_LineLoader.add_constructor("tag:yaml.org,2002:map", lambda loader, node: loader.construct_mapping(node))
_LineLoader.add_constructor("tag:yaml.org,2002:seq", lambda loader, node: loader.construct_sequence(node))


def read_yaml(path: Path) -> Any:
    """The file's YAML, its mappings and sequences with their lines; SweepFileError where it cannot be read."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise SweepFileError(path, 1, f"cannot read sweep file: {error.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[:error.start].count(b"\n") + 1
        raise SweepFileError(path, line, f"not UTF-8 text: byte {raw[error.start]:#04x} at offset "
                                         f"{error.start}") from None
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


@dataclass
class Entry:
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


class Checker:
    """Validation helpers that know the file, so every error carries file and line."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, line: int, message: str) -> SweepFileError:
        return SweepFileError(self.path, line, message)

    def mapping(self, value: Any, where: str, line: int) -> LineMapping:
        if value is None:  # an empty section ('cluster:' with nothing under it)
            return LineMapping(line=line)
        if not isinstance(value, LineMapping):
            raise self.fail(line, f"{where} must be a mapping of keys to values, got {short_repr(value)}")
        return value

    def keys(self, mapping: LineMapping, valid: Iterable[str], where: str,
             hints: dict[str, str] | None = None) -> None:
        valid = list(valid)
        for key, line in mapping.lines.items():
            if key in valid:
                continue
            if hints and key in hints:
                raise self.fail(line, f"key {short_repr(key)} is not allowed in {where}: {hints[key]}")
            close = difflib.get_close_matches(str(key), valid, n=1)
            suggestion = f" (did you mean {close[0]!r}?)" if close else f" (valid: {', '.join(valid)})"
            raise self.fail(line, f"unknown key {short_repr(key)} in {where}{suggestion}")

    def value(self, param: Param, value: Any, where: str, line: int) -> Any:
        if value is None and param.name in schema.TARGET_KEYS:  # null: the training loop's "no target"
            raise self.fail(line, f"{where} is null: a sweep needs a target, target: {{metric: NAME, value: V}} "
                                  "or target_accuracy: V, with a value")
        value = param.read(value)
        problem = param.problem(value)
        if problem:
            raise self.fail(line, f"{where} {problem}, got {short_repr(value)}")
        return param.check(where, value)

    def section(self, mapping: LineMapping, params: Iterable[Param], where: str,
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
        if isinstance(raw, LineSequence):
            if not raw:
                raise self.fail(line, f"{where} is an empty list")
            return [self.value(param, v, f"{where}[{i}]", raw.lines[i]) for i, v in enumerate(raw)]
        return [self.value(param, raw, where, line)]

    def compressor_entry(self, raw: Any, where: str, line: int) -> Entry:
        """An entry of sweep.compressor: a name, or a mapping with 'name', value lists of the compressor's
        parameters, 'algorithm' and 'workload' settings for it alone."""
        import compressors

        entry = LineMapping({"name": raw}, line=line) if isinstance(raw, str) else self.mapping(raw, where, line)
        name = self._compressor_name(entry, where)
        declared = {p.name: p for p in compressors.params_of(name) if p.name != "seed"}
        valid_algorithms = schema.algorithms(name)
        valid = ["name", *declared, *(["algorithm"] if valid_algorithms else []), "workload"]
        self.keys(entry, valid, where, _entry_hints(name, set(declared), bool(valid_algorithms), where))
        out = Entry(name, where=where, line=entry.line)
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

    def _compressor_name(self, entry: LineMapping, where: str) -> str:
        import compressors

        names = compressors.names()  # with those the sweep's imports registered
        if "name" not in entry:
            raise self.fail(entry.line, f"{where} needs a 'name' (one of {', '.join(names)})")
        name = entry["name"]
        if name not in names:
            close = difflib.get_close_matches(str(name), names, n=1)
            suggestion = f" (did you mean {close[0]!r}?)" if close else ""
            raise self.fail(entry.lines["name"], f"unknown compressor {short_repr(name)} in {where}{suggestion}; "
                                                 f"valid: {', '.join(names)}")
        return name


def _entry_hints(name: str, declared: set[str], has_algorithms: bool, where: str) -> dict[str, str]:
    """Why a key is not allowed in the entry of compressor ``name`` at ``where``, for the keys a user may
    put there by mistake."""
    hints = {p: f"compressor {name!r} has no parameter {p!r}" for p in schema.compressor_param_names()
             if p not in declared}
    hints["seed"] = "the seed is a sweep axis"
    for key in {p.name for p in schema.WORKLOAD} - declared:
        hints[key] = f"a workload setting; write it under '{where}.workload'"
    if not has_algorithms:
        hints["algorithm"] = f"{name!r} runs its own communication hook"
    return hints
