"""The one way a configuration is written: trial names, the progress log, tables, plots and benchmarks.

A label is the compressor's name followed by ``key=value`` for each setting
shown, in the order given: ``qsgd bits=4 algorithm=sra lr=0.1``. Within a
study (``config_labels``) a label shows the compressor's parameters and
algorithm only where they differ from the compressor's defaults or vary
between its trials, then a sync other than every_step with its settings on
the same rule (``fp16 sync=diloco inner_steps=50``), then the other settings
that vary between trials; the full
settings stay in the results' columns. Values are written so that distinct
values give distinct text (floats in their shortest round-trip form).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import compressors

from .settings import ALL_SYNC_KEYS, SYNC_DEFAULTS, SYNC_KEYS, compressor_param_names, default_algorithm

# Settings a label never shows as "varying": what tells configurations apart is shown per compressor (and
# per sync), and workers and seed are where a configuration is run, not what it is.
_NOT_VARYING = ("compressor", "compressor_params", "algorithm", "num_workers", "seed", "sync", *ALL_SYNC_KEYS)


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


def _text(value: Any) -> str:
    """A value as comparable text; 4.0 is 4 (a table's column of numbers with gaps holds floats)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, sort_keys=True, default=str)


def config_labels(rows: Sequence[Mapping[str, Any]], settings: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    """The label of each row of a study (a trial's settings, its compressor's parameters spread in).

    A row shows its compressor's parameters and algorithm that differ from the defaults or vary
    between the rows of that compressor, then those of ``settings`` whose values vary between all
    rows (compressor, algorithm, num_workers and seed aside), then ``extra``.
    """
    varying = [key for key in settings if key not in _NOT_VARYING and key not in compressor_param_names()
               and len({_text(row.get(key)) for row in rows}) > 1]
    by_compressor: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_compressor.setdefault(str(row["compressor"]), []).append(row)
    own: dict[str, set[str]] = {}
    for name, group in by_compressor.items():
        defaults = {p.name: p.default for p in compressors.params_of(name) if p.name != "seed"} \
            if name in compressors.NAMES else {}
        defaults["algorithm"] = default_algorithm(name) if name in compressors.NAMES else None
        own[name] = {key for key, default in defaults.items()
                     if len({_text(row.get(key)) for row in group}) > 1
                     or any(row.get(key) is not None and _text(row.get(key)) != _text(default) for row in group)}
    synced = _sync_shown(rows)
    labels = []
    for row in rows:
        shown = own[str(row["compressor"])]
        keys = [k for k in (*compressor_param_names(), "algorithm") if k in shown]
        labels.append(config_label(row, [*keys, *synced.get(str(row.get("sync")), ()), *varying, *extra]))
    return labels


def _sync_shown(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per sync other than every_step, the keys its rows show: sync itself, then the settings it takes that
    have no default, differ from theirs, or vary between its rows."""
    shown: dict[str, list[str]] = {}
    for sync in dict.fromkeys(str(row.get("sync")) for row in rows):
        if sync not in SYNC_KEYS or sync == "every_step":
            continue
        group = [row for row in rows if str(row.get("sync")) == sync]
        shown[sync] = ["sync", *(key for key in SYNC_KEYS[sync]
                                 if key not in SYNC_DEFAULTS or len({_text(r.get(key)) for r in group}) > 1
                                 or any(_text(r.get(key)) != _text(SYNC_DEFAULTS[key]) for r in group))]
    return shown
