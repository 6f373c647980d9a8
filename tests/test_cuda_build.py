"""The CUDA programs compile: every ``compressors/cuda/<program>.cu`` with nvcc for Hopper (sm_90)
under the options CuPy's NVRTC gets, warnings as errors, so a syntax or type error shows in CI
and not first on a lent GPU. Skipped where no nvcc is installed (the GPU machine's own run
compiles through CuPy)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import compressors
from compressors.cuda import build

NVCC = shutil.which("nvcc")


def _nvcc(code: str, tmp_path, name: str) -> subprocess.CompletedProcess:
    source = tmp_path / f"{name}.cu"
    source.write_text(code)
    return subprocess.run([NVCC, "-cubin", "-arch=sm_90", *build.OPTIONS, "-Werror", "all-warnings",
                           "-o", str(tmp_path / f"{name}.cubin"), str(source)], capture_output=True, text=True, check=False)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: the CUDA programs are compiled on the GPU only")
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
