"""Markdown tables of settings declarations and of every compressor's parameters: the docs' settings
tables (docs/sweeps.md), which ``settings.markdown`` makes of its declarations."""

from __future__ import annotations

import math
from collections.abc import Iterable

import compressors
from compressors.core.params import Param


def _default_text(p: Param) -> str:
    if p.default is None:
        return "null"
    if isinstance(p.default, bool):
        return str(p.default).lower()
    if isinstance(p.default, float) and math.isfinite(p.default) and p.default == int(p.default):
        return f"{p.default:g}"
    return str(p.default)


def _table(params: Iterable[Param], first: str = "setting") -> list[str]:
    lines = [f"| {first} | default | valid | meaning |", "|---|---|---|---|"]
    for p in params:
        lines.append(f"| `{p.name}` | `{_default_text(p)}` | {p.describe()} | {p.doc} |")
    return lines


def markdown(sections: Iterable[tuple[str, Iterable[Param]]]) -> str:
    """A table per ``(title, declarations)`` section, then one of every compressor's parameters."""
    out: list[str] = []
    for title, params in sections:
        out += [f"#### {title}", "", *_table(params), ""]
    out += ["#### Compressor parameters (`compressor_params`; in a sweep file, keys of a compressor entry)", "",
            "| compressor | parameter | default | valid | meaning |", "|---|---|---|---|---|"]
    for name in compressors.NAMES:
        for p in compressors.params_of(name):
            if p.name != "seed":
                out.append(f"| `{name}` | `{p.name}` | `{_default_text(p)}` | {p.describe()} | {p.doc} |")
    return "\n".join(out) + "\n"
