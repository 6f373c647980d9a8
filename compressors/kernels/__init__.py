"""Numba CPU kernels of the compressors (``impl="numba"``), one module per method.

Each kernel gives the torch reference's payload bytes and decoded bits
exactly (tests/compressors/kernels/test_kernels.py); NaNs may differ only in their payload bits.
Nothing here is imported until a compressor first runs on Numba, so
``import compressors`` stays quick.

Compiled kernels are cached on disk (``cache=True``) in ``NUMBA_CACHE_DIR/kernels``,
by default ``$XDG_CACHE_HOME/lowprec/numba`` (``~/.cache/lowprec/numba``):
a folder every process of the user can write, Ray workers included, unlike
an installed package's own folder. The cache is keyed by the kernels' sources,
not by where they sit (``cache``): another clone or a reinstall of the same
kernels loads them instead of compiling them again.
"""
import os as _os
from pathlib import Path as _Path

_os.environ.setdefault(
    "NUMBA_CACHE_DIR",
    str(_Path(_os.environ.get("XDG_CACHE_HOME") or _Path.home() / ".cache") / "lowprec" / "numba"))

from . import cache as _cache  # noqa: E402 - after NUMBA_CACHE_DIR is set

_cache.install()
