"""Declared, validated parameters: the one vocabulary for every setting of the project.

Compressors declare their parameters with ``Param``; so do the workloads' builders
and the orchestrator's settings schema, which composes them all. A ``Param`` knows
its name, type, default, valid range or choices and a one-line doc, checks a value
(NaN and +-inf are never valid floats) and describes its valid range.
"""
from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# ``kind`` values beyond Python types: a list of positive ints (an input shape); a link rate as tc writes
# it (``100mbit``, ``2.5gbit``: bits per second with a k/m/g multiplier of 1000); a list of names.
SHAPE = "shape"
RATE = "rate"
NAMES = "names"
_RATE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([kmg]?)bit")
_RATE_UNIT = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}
# tc's tbf cannot be given less than a few kbit/s; past 100 Gbit/s no machine shapes anything.
RATE_RANGE_BPS = (8e3, 100e9)
# YAML 1.2's float syntax. PyYAML reads YAML 1.1, where a float needs a dot: 1e-3, as people write a
# learning rate, arrives as the string '1e-3' (``Param.read``).
_FLOAT_TEXT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")


def rate_bps(text: str) -> float:
    """Bits per second of a rate written as tc writes it (``100mbit`` -> 1e8); ValueError otherwise."""
    match = _RATE.fullmatch(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{short_repr(text)} is not a rate like 100mbit, 1gbit or 2.5gbit")
    return float(match.group(1)) * _RATE_UNIT[match.group(2)]


@dataclass(frozen=True)
class Param:
    name: str
    default: Any
    kind: type | str
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: the valid range excludes ``low``
    choices: tuple | None = None
    nullable: bool = False  # None is valid and means "the owner's own default"
    doc: str = ""

    def describe(self) -> str:
        """The valid values, as an error message or a table cell states them."""
        if self.choices is not None:
            text = f"one of {list(self.choices)}"
        elif self.kind == SHAPE:
            text = "a list of positive integers"
        elif self.kind == RATE:
            text = "a rate from 8kbit to 100gbit, like 100mbit or 2.5gbit"
        elif self.kind == NAMES:
            text = "a list of non-empty strings"
        elif self.kind is bool:
            text = "true or false"
        elif self.kind is str:
            text = "a non-empty string"
        elif self.kind is dict:
            text = "a mapping"
        else:
            lo = "(" if self.low_open else "["
            low = self.low if self.low is not None else "-inf"
            high = f"{self.high}]" if self.high is not None else "inf)"
            kind = self.kind.__name__
            if self.kind is float and (self.low is None or self.high is None):
                kind = "finite float"  # "(0, inf)" alone was read as letting inf in
            text = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} in {lo}{low}, {high}"
        return text + (" or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (None if it is valid)."""
        if value is None:
            return None if self.nullable else f"must be {self.describe()}"
        bad = f"must be {self.describe()}"
        if self.kind == SHAPE:
            ok = isinstance(value, (list, tuple)) and len(value) > 0 and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
            return None if ok else bad
        if self.kind == NAMES:
            ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value)
            return None if ok else bad
        if self.kind == RATE:
            try:
                ok = RATE_RANGE_BPS[0] <= rate_bps(value) <= RATE_RANGE_BPS[1]
            except ValueError:
                ok = False
            return None if ok else bad
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = _as_float(value)
        if not isinstance(value, self.kind) or (isinstance(value, bool) and self.kind is not bool):
            return bad
        if self.kind is str and not value:
            return bad
        if isinstance(value, float) and not math.isfinite(value):
            return bad
        if self.choices is not None and value not in self.choices:
            return bad
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return bad
        if self.high is not None and value > self.high:
            return bad
        return None

    def read(self, value: Any) -> Any:
        """``value`` as YAML 1.2 reads it, for the readers of YAML text (sweep files, CLI flags): for a
        float Param, a number's text (``1e-3``) becomes the float; anything else stays as it is."""
        if self.kind is float and isinstance(value, str) and _FLOAT_TEXT.fullmatch(value):
            return float(value)
        return value

    def check(self, owner: str, value: Any) -> Any:
        """``value`` in its canonical type (an int given for a float becomes a float), or ValueError."""
        problem = self.problem(value)
        if problem:
            raise ValueError(f"{owner}: {self.name}={_short(value)} is invalid; valid: {self.describe()}")
        if value is None:
            return None
        if self.kind is float:
            return float(value)
        if self.kind in (SHAPE, NAMES):
            return list(value)
        if self.kind == RATE:
            return value.strip().lower()
        return value


def _as_float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond float's range: as far out of range as inf
        return math.inf


def _pieces(value: Any, depth: int = 0) -> Iterator[str]:
    if depth > 16:
        yield "..."
    elif isinstance(value, dict):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield ", " if i else ""
            yield from _pieces(key, depth + 1)
            yield ": "
            yield from _pieces(item, depth + 1)
        yield "}"
    elif isinstance(value, (list, tuple)):
        yield "["
        for i, item in enumerate(value):
            yield ", " if i else ""
            yield from _pieces(item, depth + 1)
        yield "]"
    else:
        yield repr(value)[:1000]


def short_repr(value: Any, limit: int = 80) -> str:
    """A repr of at most ``limit`` characters, built lazily: a value of shared, nested
    parts (a YAML alias bomb) costs no more than its first ``limit`` characters."""
    text = ""
    for piece in _pieces(value):
        text += piece
        if len(text) > limit:
            return text[:limit - 3] + "..."
    return text


_short = short_repr


SEED = Param("seed", 0, int, low=0, high=2**32 - 1, doc="seed of every random choice (data order, init, rounding)")


def resolve(owner: str, declared: tuple[Param, ...], given: dict[str, Any]) -> dict[str, Any]:
    """Fill defaults and check ``given`` against ``declared``; unknown names raise."""
    by_name = {p.name: p for p in declared}
    for key in given:
        if key not in by_name:
            hint = difflib.get_close_matches(str(key), by_name, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            valid = f"valid: {sorted(by_name)}" if by_name else "it takes no parameters"
            raise ValueError(f"{owner}: unknown parameter {_short(key)}{suggestion}; {valid}")
    return {p.name: p.check(owner, given.get(p.name, p.default)) for p in declared}
