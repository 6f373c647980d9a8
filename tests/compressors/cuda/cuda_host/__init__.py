"""The CUDA programs (compressors/cuda) run on the CPU, for tests on a machine without a GPU.

``host_kernels(program)`` compiles ``build.source(program)`` with g++ against ``emu.h`` (each
block's 256 threads as fibers switched at every barrier; shared memory poisoned per block) and returns a
``launch.Kernels`` over NumPy arrays whose launches check every argument's type against the
kernel's C parameters, as a GPU would not. Grids are capped at 3 blocks, so grid-stride loops
run more than one round and more than one block. What it cannot show: races between blocks
(they run one after another), the GPU's memory model, speed.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from compressors.cuda import build, launch

HERE = Path(__file__).resolve().parent
MAX_BLOCKS = 3
_SIGNATURE = re.compile(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\s*\(([^)]*)\)')
# C parameter types (qualifiers dropped) -> (ctypes type, NumPy scalar type).
_SCALARS = {
    "long long": (ctypes.c_int64, np.int64), "i64": (ctypes.c_int64, np.int64),
    "int": (ctypes.c_int32, np.int32),
    "unsigned int": (ctypes.c_uint32, np.uint32), "unsigned": (ctypes.c_uint32, np.uint32),
    "u32": (ctypes.c_uint32, np.uint32),
    "unsigned long long": (ctypes.c_uint64, np.uint64), "u64": (ctypes.c_uint64, np.uint64),
    "float": (ctypes.c_float, np.float32), "double": (ctypes.c_double, np.float64),
    "u8": (ctypes.c_uint8, np.uint8), "unsigned char": (ctypes.c_uint8, np.uint8),
}


def available() -> str | None:
    """None where the emulator can run, else why not."""
    return None if shutil.which("g++") else "g++ is not installed"


def _parameters(text: str) -> list[tuple[str, str]]:
    """(type, name) of each parameter of a kernel's parameter list."""
    params = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.match(r"(.*?)(\w+)$", part, re.S)
        ctype = " ".join(w for w in match.group(1).replace("*", " * ").split()
                         if w not in ("const", "__restrict__", "volatile"))
        params.append((ctype, match.group(2)))
    return params


@functools.cache
def _library(program: str, code: str) -> tuple[ctypes.CDLL, dict[str, list[str]]]:
    kernels = {name: _parameters(params) for name, params in _SIGNATURE.findall(code)}
    wrappers = []
    for name, params in kernels.items():
        decl = ", ".join(f"{t} {n}" for t, n in params)
        args = ", ".join(n for _, n in params)
        wrappers.append(f'extern "C" void lpemu_{name}(unsigned lpemu_blocks{", " if decl else ""}{decl}) '
                        f'{{ lpemu::launch(lpemu_blocks, [=]() {{ {name}({args}); }}); }}')
    text = f'#include "{HERE / "emu.h"}"\n{code}\n' + "\n".join(wrappers) + "\n"
    digest = hashlib.sha256((text + (HERE / "emu.h").read_text()).encode()).hexdigest()[:16]
    folder = Path.home() / ".cache" / "lowprec" / "cuda_host"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{program}-{digest}.so"
    if not target.exists():
        source = folder / f"{program}-{digest}.cpp"
        source.write_text(text)
        result = subprocess.run(["g++", "-std=c++20", "-O1", "-fPIC", "-shared", "-w",
                                 "-fno-fast-math", "-ffp-contract=off", "-fno-weak", "-U_FORTIFY_SOURCE", "-o", str(target) + ".tmp", str(source)],
                                capture_output=True, text=True, check=False)
        if result.returncode:
            raise build.KernelCompileError(f"{program}.cu does not compile for the host emulator:\n{result.stderr}")
        Path(str(target) + ".tmp").rename(target)
    lib = ctypes.CDLL(str(target))
    types = {}
    for name, params in kernels.items():
        fn = getattr(lib, f"lpemu_{name}")
        fn.argtypes = [ctypes.c_uint] + [ctypes.c_void_p if "*" in t else _SCALARS[t][0] for t, _ in params]
        fn.restype = None
        types[name] = [t for t, _ in params]
    return lib, types


class HostKernels(launch.Kernels):
    """A program's kernels on the CPU over NumPy arrays."""

    xp = np

    def __init__(self, program: str, code: str | None = None) -> None:
        super().__init__(program, MAX_BLOCKS)
        self._lib, self._types = _library(program, build.source(program) if code is None else code)

    def address(self, array: Any) -> int:
        return int(array.ctypes.data)

    def as_array(self, tensor: Any) -> np.ndarray:
        """A NumPy view of a CPU tensor (the same memory, as DLPack gives CuPy a CUDA tensor's)."""
        return tensor.detach().numpy()

    def _launch(self, kernel: str, blocks: int, args: tuple[Any, ...]) -> None:
        if kernel not in self._types:
            raise KeyError(f"{self.method}.cu has no kernel {kernel} (it has {', '.join(self._types)})")
        types = self._types[kernel]
        if len(args) != len(types):
            raise TypeError(f"{kernel}: {len(args)} arguments for {len(types)} parameters")
        values = []
        for i, (arg, ctype) in enumerate(zip(args, types)):
            if "*" in ctype:
                if not isinstance(arg, np.ndarray) or not arg.flags.c_contiguous:
                    raise TypeError(f"{kernel} argument {i} ({ctype}): expected a contiguous array, got {type(arg)}")
                base = ctype.replace("*", "").strip()
                if base in _SCALARS and np.dtype(_SCALARS[base][1]).itemsize != arg.itemsize:
                    raise TypeError(f"{kernel} argument {i} ({ctype}): an array of {arg.dtype}")
                values.append(arg.ctypes.data)
            else:
                want = _SCALARS[ctype][1]
                if type(arg) is not want:
                    raise TypeError(f"{kernel} argument {i} ({ctype}): expected {want.__name__}, got "
                                    f"{type(arg).__name__} {arg!r}")
                values.append(arg.item())
        getattr(self._lib, f"lpemu_{kernel}")(blocks, *values)


@functools.cache
def host_kernels(program: str) -> HostKernels:
    return HostKernels(program)
