"""The CUDA sources of the compressors and the options every compiler is given.

A method's program is ``common.cuh`` followed by its ``<method>.cu``, with a ``#line`` so that
compiler messages name the method's file and line. No ``#include``: NVRTC has no standard headers,
and CuPy's cache keys on the program's text, which an included file would escape.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
# --fmad=false: a multiply-add fused into one rounding gives other bits than the CPU kernels' two.
OPTIONS = ("--fmad=false", "-std=c++17")
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\s*\(')


class KernelCompileError(RuntimeError):
    """A method's CUDA program failed to compile (or lacks a kernel its compressor launches)."""


def methods() -> tuple[str, ...]:
    """The names of the ``.cu`` programs, sorted."""
    return tuple(sorted(path.stem for path in SOURCE_DIR.glob("*.cu")))


@functools.cache
def source(method: str) -> str:
    """The whole program of ``method``: common.cuh, then ``<method>.cu`` from its line 1."""
    path = SOURCE_DIR / f"{method}.cu"
    if not path.is_file():
        raise KernelCompileError(f"no CUDA program {path.name} in {SOURCE_DIR} (programs: {', '.join(methods())})")
    common = (SOURCE_DIR / "common.cuh").read_text()
    return f'#line 1 "common.cuh"\n{common}\n#line 1 "{path.name}"\n{path.read_text()}'


def kernel_names(method: str) -> tuple[str, ...]:
    """The ``extern "C" __global__`` kernels of ``<method>.cu``, in file order."""
    return tuple(_KERNEL.findall((SOURCE_DIR / f"{method}.cu").read_text()))
