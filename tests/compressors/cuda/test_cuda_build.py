"""The CUDA programs compile, so that a syntax or type error shows in CI and not first on a
GPU machine: every ``compressors/cuda/<program>.cu`` with NVRTC (the compiler CuPy runs; from the
``nvidia-cuda-nvrtc`` wheel of the test extra, called through ctypes: no GPU needed) for Hopper
under the options CuPy gets, no warnings allowed; or, where that wheel is missing, with nvcc
for sm_90, warnings as errors. Skipped where neither compiler is installed."""
from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import compressors
from compressors.cuda import build

NVCC = shutil.which("nvcc")


@functools.cache
def _nvrtc() -> ctypes.CDLL | None:
    """NVRTC from the nvidia-cuda-nvrtc wheel (CUDA 13's, or 12's), None if neither is installed."""
    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for pattern in ("cu13/lib/libnvrtc.so.13*", "cuda_nvrtc/lib/libnvrtc.so.12*"):
            for path in sorted(Path(folder).glob(pattern)):
                if "builtins" not in path.name:
                    return ctypes.CDLL(str(path))
    return None


def _nvrtc_compile(code: str, name: str, arch: str) -> tuple[int, str]:
    """NVRTC's result code and log for ``code`` under build.OPTIONS."""
    lib = _nvrtc()
    program = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(program), code.encode(), name.encode(), 0, None, None) == 0
    options = [o.encode() for o in (*build.OPTIONS, f"-arch={arch}")]
    result = lib.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(program, log)
    lib.nvrtcDestroyProgram(ctypes.byref(program))
    return result, log.value.decode(errors="replace").strip()


@functools.cache
def _nvrtc_compiled() -> dict[str, tuple[int, str]]:
    """Every program compiled by NVRTC, two at a time: each its own nvrtcProgram, which NVRTC allows
    in concurrent threads (ctypes releases the GIL during the call)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        futures = {program: pool.submit(_nvrtc_compile, build.source(program), f"{program}.cu", "sm_90")
                   for program in build.methods()}
        return {program: future.result() for program, future in futures.items()}


@pytest.mark.slow  # compiles every program: seconds
@pytest.mark.skipif(_nvrtc() is None, reason="the nvidia-cuda-nvrtc wheel is not installed (pip install -e '.[test]')")
@pytest.mark.parametrize("program", build.methods())
def test_nvrtc_compiles_the_program(program):
    result, log = _nvrtc_compiled()[program]
    assert result == 0 and not log, f"{program}.cu: NVRTC result {result}\n{log}"


@pytest.mark.skipif(_nvrtc() is None, reason="the nvidia-cuda-nvrtc wheel is not installed")
def test_an_nvrtc_error_names_the_program_and_line():
    program = build.methods()[0]
    source = build.source(program) + "\nextern \"C\" __global__ void broken(int* x) { x[0] = y; }\n"
    result, log = _nvrtc_compile(source, f"{program}.cu", "sm_90")
    assert result != 0 and f"{program}.cu(" in log and "identifier \"y\" is undefined" in log


def _nvcc(code: str, tmp_path, name: str) -> subprocess.CompletedProcess:
    source = tmp_path / f"{name}.cu"
    source.write_text(code)
    return subprocess.run([NVCC, "-cubin", "-arch=sm_90", *build.OPTIONS, "-Werror", "all-warnings",
                           "-o", str(tmp_path / f"{name}.cubin"), str(source)], capture_output=True, text=True, check=False)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: the CUDA programs are compiled on the GPU only")
@pytest.mark.skipif(_nvrtc() is not None, reason="NVRTC compiled every program (test_nvrtc_compiles_the_program)")
@pytest.mark.parametrize("program", build.methods())
def test_the_program_compiles(program, tmp_path):
    result = _nvcc(build.source(program), tmp_path, program)
    assert result.returncode == 0, f"{program}.cu:\n{result.stderr}"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_a_compile_error_names_the_program_and_line(tmp_path):
    broken = build.source(build.methods()[0]) + "\nextern \"C\" __global__ void broken(int* x) { x[0] = y; }\n"
    result = _nvcc(broken, tmp_path, "broken")
    assert result.returncode != 0
    assert f"{build.methods()[0]}.cu(" in result.stderr and "identifier \"y\" is undefined" in result.stderr


def test_the_programs_include_nothing_and_every_compressor_has_one():
    """NVRTC has no standard headers, and CuPy's cache keys on the text: no #include anywhere."""
    for program in build.methods():
        assert not re.search(r"^\s*#\s*include", build.source(program), re.M), program
        assert build.kernel_names(program), f"{program}.cu declares no extern \"C\" __global__ kernel"
    used = {cls.cuda_program for cls in compressors.COMPRESSORS.values() if cls.cuda_program}
    assert used == set(build.methods())


def test_an_unknown_program_is_named():
    with pytest.raises(build.KernelCompileError, match="no CUDA program nope.cu"):
        build.source("nope")
