"""Declared, validated compressor parameters."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Param:
    name: str
    default: Any
    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: the valid range excludes ``low``
    choices: tuple | None = None

    def describe(self) -> str:
        if self.choices is not None:
            return f"one of {list(self.choices)}"
        lo = "(" if self.low_open else "["
        hi = "]" if self.high is not None else ")"
        return f"a {self.kind.__name__} in {lo}{self.low}, {self.high if self.high is not None else 'inf'}{hi}"

    def check(self, owner: str, value: Any) -> Any:
        bad = ValueError(f"{owner}: {self.name}={value!r} is invalid; valid: {self.describe()}")
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.kind) or isinstance(value, bool) and self.kind is not bool:
            raise bad
        if self.choices is not None and value not in self.choices:
            raise bad
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            raise bad
        if self.high is not None and value > self.high:
            raise bad
        return value


SEED = Param("seed", 0, int, low=0, high=2**32 - 1)


def resolve(owner: str, declared: tuple[Param, ...], given: dict[str, Any]) -> dict[str, Any]:
    """Fill defaults and check ``given`` against ``declared``; unknown names raise."""
    by_name = {p.name: p for p in declared}
    for key in given:
        if key not in by_name:
            hint = difflib.get_close_matches(key, by_name, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ValueError(f"{owner}: unknown parameter {key!r}{suggestion}; valid: {sorted(by_name)}")
    return {p.name: p.check(owner, given.get(p.name, p.default)) for p in declared}
