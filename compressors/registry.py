"""Compressors by name, with their parameters checked."""
from __future__ import annotations

from typing import Any

from .base import Compressor
from .casts import BFloat16, Float16, NoCompression
from .onebit import OneBit
from .params import SEED, Param, resolve
from .qsgd import QSGD
from .scaled8 import Dynamic8, Linear8
from .sparse import Adaptive, TopK

COMPRESSORS: dict[str, type[Compressor]] = {
    c.name: c for c in (NoCompression, Float16, BFloat16, Dynamic8, Linear8, QSGD, OneBit, Adaptive, TopK)
}
# PyTorch's PowerSGD hook is used as is; it has no payload of ours.
POWERSGD_PARAMS = (Param("matrix_rank", 1, int, low=1, high=1024), SEED)
NAMES: tuple[str, ...] = tuple(COMPRESSORS) + ("powersgd",)
# The baselines travel through a native all_reduce of the cast tensor.
NATIVE = ("none", "fp16", "bf16")


def _unknown(name: str) -> ValueError:
    return ValueError(f"unknown compressor {name!r}; valid: {list(NAMES)}")


def check_params(name: str, **params: Any) -> dict[str, Any]:
    """The full parameter dict of ``name`` (defaults filled), or ValueError."""
    if name == "powersgd":
        return resolve(name, POWERSGD_PARAMS, params)
    if name not in COMPRESSORS:
        raise _unknown(name)
    cls = COMPRESSORS[name]
    return resolve(name, cls.params + (SEED,), params)


def get(name: str, **params: Any) -> Compressor:
    """A configured compressor; ValueError names valid choices or ranges."""
    if name == "powersgd":
        raise ValueError("powersgd is PyTorch's DDP hook, not a payload codec: use compressors.Reducer('powersgd')")
    if name not in COMPRESSORS:
        raise _unknown(name)
    return COMPRESSORS[name](**params)
