"""The one way a configuration is written: trial names, tables, plots and benchmarks.

A label is the compressor's name followed by ``key=value`` for each setting
shown, in the order given: ``qsgd bits=4 bucket=512 algorithm=sra num_workers=2``.
Values are written so that distinct values give distinct text (floats in their
shortest round-trip form), so distinct settings never share a label.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def format_value(value: Any) -> str:
    """YAML-like text of a setting's value: true/false, null, shortest round-trip floats, AxB lists."""
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, (list, tuple)):
        return "x".join(format_value(v) for v in value)
    return str(value)


def config_label(settings: Mapping[str, Any], keys: Iterable[str] = ()) -> str:
    """``compressor key=value ...`` for the ``keys`` whose value is set (not None)."""
    parts = [str(settings["compressor"])]
    parts += [f"{key}={format_value(settings[key])}" for key in keys
              if key != "compressor" and settings.get(key) is not None]
    return " ".join(parts)
