"""Everything the CUDA kernels need checked on a GPU machine, in one command without Ray:

    python benchmarks/gpu_check.py OUTDIR [--steps compile,tests,sanitizer,world,bench]

compile: every compressors/cuda program through CuPy (NVRTC); tests: tests/compressors/cuda/test_cuda_gpu.py
(the kernels against Numba, fresh random inputs up to 2**26 elements); sanitizer: the same tests
under compute-sanitizer memcheck (inputs up to 2**17: memcheck is slow); world: a one-GPU NCCL
world under torchrun (benchmarks/cuda_world.py); bench: benchmarks/cuda_bench.py. Writes
OUTDIR/log.txt (every step's output), OUTDIR/world.json, OUTDIR/bench.json and OUTDIR/gpu_check.json
(the summary), and prints a short table last. Exits 1 if a step failed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("compile", "tests", "sanitizer", "world", "bench")


def _pythonpath() -> str:
    """The checkout first: the GPU machine runs it uninstalled (the benchmarks import compressors)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def _run(name: str, command: list[str], log, timeout: int, env: dict | None = None) -> dict:
    log.write(f"\n===== {name}: {' '.join(command)}\n")
    log.flush()
    start = time.time()
    try:
        result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": _pythonpath(),
                                                      **(env or {})})
        output, code = result.stdout, result.returncode
    except subprocess.TimeoutExpired as err:
        output, code = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or ""), "timeout"
    log.write(output)
    log.flush()
    tail = [line for line in output.strip().splitlines() if line.strip(" =-")][-1:] or [""]
    return {"step": name, "ok": code == 0, "exit": code, "seconds": round(time.time() - start, 1), "last_line": tail[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma separated, of {', '.join(STEPS)}")
    parser.add_argument("--bench-max-log2", type=int, default=28)
    args = parser.parse_args()
    steps = args.steps.split(",")
    if any(s not in STEPS for s in steps):
        parser.error(f"--steps: a comma separated subset of {', '.join(STEPS)}")
    args.outdir.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    summary = {"python": platform.python_version(), "steps": []}
    with open(args.outdir / "log.txt", "w") as log:
        facts = _run("facts", [py, "-c", "import torch, cupy; print(torch.__version__, torch.cuda.get_device_name(), "
                               "'cupy', cupy.__version__, 'cuda runtime', cupy.cuda.runtime.runtimeGetVersion())"],
                     log, 120)
        summary["facts"] = facts["last_line"]
        if "compile" in steps:
            summary["steps"].append(_run("compile", [py, "-c", (
                "import time; from compressors.cuda import build, launch\n"
                "for m in build.methods():\n"
                "    t = time.time(); fns = launch._compiled(m, 0)\n"
                "    print(f'{m}: {len(fns)} kernels compiled in {time.time() - t:.1f} s')\n"
                "print('compiled', len(build.methods()), 'programs')")], log, 600))
        if "tests" in steps:
            summary["steps"].append(_run("tests", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                                                   "tests/compressors/cuda/test_cuda_gpu.py"], log, 1800))
        if "sanitizer" in steps:
            sanitizer = shutil.which("compute-sanitizer") or "compute-sanitizer"
            summary["steps"].append(_run("sanitizer", [sanitizer, "--tool", "memcheck", "--error-exitcode", "3",
                                                       "--target-processes", "all", py, "-m", "pytest", "-q", "-x",
                                                       "-p", "no:cacheprovider", "-m", "gpu", "tests/compressors/cuda/test_cuda_gpu.py",
                                                       "-k", "same_payloads"],
                                         log, 1800, env={"LOWPREC_GPU_MAX_NUMEL": str(2 ** 17)}))
        if "world" in steps:
            summary["steps"].append(_run("world", [py, "-m", "torch.distributed.run", "--nproc_per_node=1",
                                                   "benchmarks/cuda_world.py", "--out", str(args.outdir / "world.json")],
                                         log, 900))
        if "bench" in steps:
            summary["steps"].append(_run("bench", [py, "benchmarks/cuda_bench.py", "--out",
                                                   str(args.outdir / "bench.json"),
                                                   "--max-log2", str(args.bench_max_log2)], log, 1800))
    (args.outdir / "gpu_check.json").write_text(json.dumps(summary, indent=1))
    bench = args.outdir / "bench.json"
    if "bench" in steps and bench.exists():
        table = json.loads(bench.read_text())
        print(f"copy {table['copy_gbps']:.0f} GB/s; at 2**24: " + ", ".join(
            f"{t['compressor']} enc {t['encode_of_copy']:.2f} dec {t['decode_of_copy']:.2f}"
            for t in table["table"] if t["numel"] == 2 ** 24))
    print(summary["facts"])
    print(f"{'step':10} {'ok':4} {'seconds':>8}  last line")
    for s in summary["steps"]:
        print(f"{s['step']:10} {'yes' if s['ok'] else 'NO':4} {s['seconds']:8.1f}  {s['last_line'][:90]}")
    raise SystemExit(0 if all(s["ok"] for s in summary["steps"]) else 1)


if __name__ == "__main__":
    main()
