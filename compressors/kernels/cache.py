"""Where Numba caches the kernels' compiled code: one folder for every copy of these kernels on the machine.

Numba keys its cache by the folder a source file sits in, so a fresh clone, a second checkout or a
reinstall compiles every kernel again (half a minute on two cores). ``KernelCacheLocator`` keeps this
package's kernels in ``$NUMBA_CACHE_DIR/kernels`` whatever the folder, stamped with a hash of every
kernel source file together (one file's kernels inline another's helpers), so that the same sources
load what any copy compiled, and a change to any of them compiles all of them again. Numba's index
also holds its own version and each overload's CPU, so a cache from another Numba or CPU is not loaded.
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from numba.core import caching, config

_KERNELS = Path(__file__).resolve().parent


@functools.cache
def _digest(stamps: tuple[tuple[str, int, int], ...]) -> str:
    hashed = hashlib.sha256()
    for name, _, _ in stamps:
        hashed.update(name.encode() + b"\0" + (_KERNELS / name).read_bytes() + b"\0")
    return hashed.hexdigest()


def sources_digest() -> str:
    """A hash of the kernel sources (re-read when a file's time or size changes)."""
    stamps = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(_KERNELS.glob("*.py")))
    return _digest(stamps)


class KernelCacheLocator(caching.UserProvidedCacheLocator):
    """Numba's NUMBA_CACHE_DIR locator, for the functions of this package only, in one folder keyed by
    the sources' hash (other functions go to Numba's own locators). The folder is read from the
    environment when a kernel compiles: Numba reads its config once, maybe before this package set it."""

    def __init__(self, py_func, py_file) -> None:  # noqa: D107 - Numba's signature
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(os.environ.get("NUMBA_CACHE_DIR") or config.CACHE_DIR, "kernels")

    def get_source_stamp(self) -> str:
        return sources_digest()

    @classmethod
    def from_function(cls, py_func, py_file):
        if not py_file or Path(py_file).resolve().parent != _KERNELS:
            return None
        locator = cls(py_func, py_file)
        try:
            locator.ensure_cache_path()
        except OSError:  # not writable: Numba's other locators, or no cache
            return None
        return locator


def install() -> None:
    """Put KernelCacheLocator first among Numba's locators (once; where this Numba has that list)."""
    locators = getattr(caching.CacheImpl, "_locator_classes", None)
    if isinstance(locators, list) and KernelCacheLocator not in locators:
        locators.insert(0, KernelCacheLocator)
