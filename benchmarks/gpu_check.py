"""Everything the GPU path needs checked on a GPU machine, in one command without Ray:

    python benchmarks/gpu_check.py OUTDIR [--steps compile,tests,world,ranks,training,sanitizer] [--budget-s 480]

compile: every compressors/cuda program through CuPy (NVRTC). tests: the gpu-marked tests (the
kernels against Numba on fresh random inputs up to 2**26 elements, adversarial values, poisoned
buffers, mutated payloads, a side stream; the training loop's CUDA events). world: a one-GPU
NCCL world under torchrun (benchmarks/cuda_world.py: every compressor x algorithm against the
Numba Reducer over gloo, overlapped against blocking hooks on an MLP and ResNet-20). ranks: 2 and
4 ranks sharing the GPU over gloo with CUDA tensors (the collectives only). training: the training
loop under torchrun with ``use_gpu`` on the built-in MNIST, one worker, for the quickstart's methods
and powersgd, with the GPU's account of each step beside the CPU's. sanitizer: the payload tests
(inputs up to 2**17) under compute-sanitizer memcheck, then racecheck. bench (not in the default
steps): the kernels' throughput against the device's copy and the torch reference, and their speed
goals (benchmarks/compressor_bench.py at 2**20, 2**22, ... up to 2**``--bench-max-log2``, inside what
is left of the budget; ``--bench-compressors`` names the compressors, every one by default). costs (not in the default steps either): what each compressor costs a training step of
ResNet-50 and of GPT-2 small on the GPU, beside the step's compute (benchmarks/step_costs.py).

``--cpu`` is a dry run on a machine without a GPU: world, ranks, training, bench and costs on CPU
tensors over gloo (compile, tests and sanitizer need a GPU; bench at 2**20 only, costs on small
inputs), to try the script before spending GPU time.

The steps run in that order inside ``--budget-s`` seconds in all: a step gets what is left of it,
up to its own cap; one cut short is recorded as "timeout", one left no time as "skipped". OUTDIR
gets log.txt (every step's output), check.json (the record, rewritten after every step, so a run
stopped from outside leaves what it finished), world.json, ranks.json, training.json, bench.json
and step_costs.json; a short table is printed last. Exits 1 if a step failed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("compile", "tests", "world", "ranks", "training", "sanitizer", "bench", "costs")
DEFAULT_STEPS = STEPS[:-2]
CPU_STEPS = ("world", "ranks", "training", "bench", "costs")  # what a dry run without a GPU can run
CPU_DEFAULT_STEPS = CPU_STEPS[:-2]
GPU_TESTS = ["tests/compressors/cuda/test_cuda_gpu.py", "tests/orchestrator/study/test_cuda_events.py"]
RANKS = (2, 4)
BENCHMARK_CAP_S = 600
# The quickstart's workload (sweeps/quickstart.yaml) and methods, and PowerSGD.
TRAINING = ["--dataset", "mnist", "--model", "mlp", "--width", "256", "--depth", "2", "--epochs", "1",
            "--batch_size", "64", "--optimizer", "sgd", "--lr", "0.05", "--max_steps_per_epoch", "50"]
METHODS = [("fp32", None), ("fp16", None), ("dynamic8", None), ("qsgd", "{bits: 4}"), ("onebit", None),
           ("adaptive", "{pi: 0.05}"), ("powersgd", None)]


def _pythonpath() -> str:
    """The checkout first: the GPU machine runs it uninstalled (the benchmarks import compressors)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


class Runner:
    """Runs the steps' commands inside one time budget, their output going straight to the log."""

    def __init__(self, log_path: Path, budget_s: float) -> None:
        self.log_path = log_path
        self.deadline = time.monotonic() + budget_s

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, command: list[str], cap_s: float, env: dict | None = None) -> dict:
        """Run ``command`` for at most ``cap_s`` seconds and what is left of the budget. A command cut
        short gets SIGTERM, then SIGKILL, in its own process group: torchrun's workers and a sanitized
        process end with it rather than run on into the next step."""
        timeout = min(cap_s, self.left())
        with open(self.log_path, "a") as log:
            log.write(f"\n===== {name}: {' '.join(command)}  (at most {timeout:.0f} s)\n")
            log.flush()
            begin = log.tell()
            start = time.monotonic()
            if timeout < 5:
                log.write("no time left in the budget\n")
                code = "skipped"
            else:
                child = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": _pythonpath(),
                                              **(env or {})})
                try:
                    code = child.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    code = "timeout"
                    _end(child)
        with open(self.log_path, "rb") as log:
            log.seek(begin)
            output = log.read().decode(errors="replace")
        tail = [line for line in output.strip().splitlines() if line.strip(" =-")][-1:] or [""]
        return {"step": name, "ok": code == 0, "exit": code, "seconds": round(time.monotonic() - start, 1),
                "last_line": tail[0], "output": output}


def _end(child: subprocess.Popen) -> None:
    """End the process group this script started for ``child``: SIGTERM first (torchrun's workers are in
    process groups of their own, and torchrun ends them when it gets SIGTERM), then SIGKILL for whatever
    of the group is left."""
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:  # the group is gone
            break
        try:
            child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass


def pytest_counts(output: str) -> dict[str, int]:
    """passed, failed (errors too) and skipped from pytest's last summary line."""
    lines = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed|error|skipped|deselected)", line)]
    last = lines[-1] if lines else ""
    count = lambda word: sum(int(n) for n in re.findall(rf"(\d+) {word}", last))  # noqa: E731
    return {"passed": count("passed"), "failed": count("failed") + count("error"), "skipped": count("skipped")}


def sanitizer_errors(tool: str, output: str) -> int | None:
    """compute-sanitizer's errors over every process it watched; None if no process's summary was printed.
    racecheck counts hazards in its own summary line ("RACECHECK SUMMARY: N hazards displayed (E errors,
    W warnings)"): its errors are taken from there where it printed one."""
    if tool == "racecheck":
        found = re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?", output)
        if found:
            return sum(int(n) for n in found)
    found = re.findall(r"ERROR SUMMARY: (\d+) errors?", output)
    return sum(int(n) for n in found) if found else None


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write(path: Path, data: dict) -> None:
    # Not the project's write_atomic: this script imports nothing of the project (it runs uninstalled,
    # and its first step is to find out whether the packages the project needs are there).
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _all_ran(step: dict) -> dict:
    """A pytest step with its counts (None where it did not finish); ok only if tests ran and none was
    skipped (a module skipped for want of CUDA or CuPy passes with nothing tested)."""
    finished = isinstance(step["exit"], int)
    counts = pytest_counts(step["output"]) if finished else {"passed": None, "failed": None, "skipped": None}
    return {**step, **counts, "ok": step["ok"] and bool(counts["passed"]) and counts["skipped"] == 0}


def _and(before: bool | None, now: bool) -> bool:
    """A verdict over several steps: the first one's, then all of them."""
    return now if before is None else before and now


def _torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--steps", default=None,
                        help=f"comma separated, of {', '.join(STEPS)}; default: {','.join(DEFAULT_STEPS)} "
                             f"({','.join(CPU_DEFAULT_STEPS)} with --cpu)")
    parser.add_argument("--budget-s", type=float, default=480, help="seconds for all the steps together")
    parser.add_argument("--bench-max-log2", type=int, default=28,
                        help="bench: sizes 2**20, 2**22, ... up to 2**N (N in 20 .. 30)")
    parser.add_argument("--bench-compressors", default=None, metavar="NAMES",
                        help="bench: only these compressors, comma separated (default: every one)")
    parser.add_argument("--cpu", action="store_true",
                        help="a dry run: world, ranks, training, bench and costs on CPU tensors")
    args = parser.parse_args()
    args.steps = args.steps or ",".join(CPU_DEFAULT_STEPS if args.cpu else DEFAULT_STEPS)
    steps = args.steps.split(",")
    valid = CPU_STEPS if args.cpu else STEPS
    if any(s not in valid for s in steps):
        parser.error(f"--steps: a comma separated subset of {', '.join(valid)}" + (" with --cpu" if args.cpu else ""))
    if not 20 <= args.bench_max_log2 <= 30:
        parser.error(f"--bench-max-log2: an exponent in [20, 30], got {args.bench_max_log2}")
    if not args.budget_s > 0:
        parser.error(f"--budget-s: a number of seconds > 0, got {args.budget_s}")
    args.outdir.mkdir(parents=True, exist_ok=True)
    out = args.outdir
    py = sys.executable
    record: dict = {"device": None, "date": datetime.date.today().isoformat(),
                    "command": f"python benchmarks/gpu_check.py OUTDIR --steps {args.steps} --budget-s {args.budget_s:g}"
                               + (f" --bench-compressors {args.bench_compressors}" if args.bench_compressors else "")
                               + (" --cpu" if args.cpu else ""),
                    "python": platform.python_version(), "facts": None,
                    "tests_passed": None, "tests_failed": None, "sanitizer_errors": None,
                    "world_ok": None, "training_ok": None, "steps": []}

    def done(step: dict, **facts) -> None:
        record["steps"].append({k: v for k, v in step.items() if k != "output"})
        record.update(facts)
        _write(out / "check.json", record)

    (out / "log.txt").write_text("")
    with tempfile.TemporaryDirectory() as scratch:
        runner = Runner(out / "log.txt", args.budget_s)
        # Every package a later step imports, so that a missing one shows here first.
        facts = runner.run("facts", [py, "-c", (
            "import platform, torch, numba, yaml, pandas, pytest; print('device:', platform.machine()); "
            "print('torch', torch.__version__, 'numba', numba.__version__)") if args.cpu else (
            "import torch, cupy, numba, yaml, pandas, pytest; print('device:', torch.cuda.get_device_name()); "
            "print('torch', torch.__version__, 'cupy', cupy.__version__, 'numba', numba.__version__, "
            "'cuda runtime', cupy.cuda.runtime.runtimeGetVersion())")], 120)
        cpu = ["--device", "cpu"] if args.cpu else []
        named = [line.removeprefix("device: ") for line in facts["output"].splitlines() if line.startswith("device: ")]
        done(facts, device=named[-1] if facts["ok"] and named else None, facts=facts["last_line"])
        if "compile" in steps:
            done(runner.run("compile", [py, "-c", (
                "import time; from compressors.cuda import build, launch\n"
                "for m in build.methods():\n"
                "    t = time.time(); fns = launch._compiled(m, 0)\n"
                "    print(f'{m}: {len(fns)} kernels compiled in {time.time() - t:.1f} s', flush=True)\n"
                "print('compiled', len(build.methods()), 'programs')")], 300))
        if "tests" in steps:
            step = _all_ran(runner.run("tests", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
                                                 *GPU_TESTS], 300))
            done(step, tests_passed=step["passed"], tests_failed=step["failed"])
        if "world" in steps:
            step = runner.run("world", [*_torchrun(1), "-m", "benchmarks.cuda_world", "--out", str(out / "world.json"),
                                        *(["--backend", "gloo", *cpu] if args.cpu else [])], 240)
            done(step, world_ok=_and(record["world_ok"], step["ok"]))
        if "ranks" in steps:
            worlds = {}
            for n in RANKS:
                path = Path(scratch) / f"ranks{n}.json"
                step = runner.run(f"ranks{n}", [*_torchrun(n), "-m", "benchmarks.cuda_world", "--backend", "gloo",
                                                "--parts", "collectives", "--out", str(path), *cpu], 180)
                worlds[str(n)] = _json(path)
                _write(out / "ranks.json", worlds)
                done(step, world_ok=_and(record["world_ok"], step["ok"]))
        if "training" in steps:
            runs, ok = [], True
            for method, params in METHODS:
                path = Path(scratch) / f"train_{method}.json"
                command = [*_torchrun(1), "-m", "orchestrator.study.train_loop", *TRAINING,
                           "--use_gpu", str(not args.cpu).lower(), "--compressor", method,
                           *(["--compressor_params", params] if params else []), "--json", str(path)]
                step = runner.run(f"training {method}", command, 120)
                result = _json(path) or {}
                final = result.get("final", {})
                runs.append({"compressor": method, "params": params, "status": result.get("status"),
                             "test_accuracy": final.get("test_accuracy"),
                             **{k: final.get(k) for k in ("step_time_s", "compute_s", "exposed_comm_s",
                                                          "encode_s", "comm_s", "decode_s")},
                             "cuda_events": result.get("cuda_events")})
                ok = ok and step["ok"] and result.get("status") == "ok" and \
                    (args.cpu or result.get("cuda_events") is not None)
                _write(out / "training.json", {"workload": TRAINING, "runs": runs})
                done(step, training_ok=ok)
        if "sanitizer" in steps:
            sanitizer = shutil.which("compute-sanitizer") or "compute-sanitizer"
            errors: int | None = 0
            for tool in ("memcheck", "racecheck"):
                # Without torch's caching allocator: memcheck cannot see past the end of a tensor inside a
                # cached block.
                step = _all_ran(runner.run(f"sanitizer {tool}", [
                    sanitizer, "--tool", tool, "--error-exitcode", "3", "--target-processes", "all",
                    py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "gpu", GPU_TESTS[0],
                    "-k", "same_payloads"], 600,
                    env={"LOWPREC_GPU_MAX_NUMEL": str(2 ** 17), "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}))
                found = sanitizer_errors(tool, step["output"]) if isinstance(step["exit"], int) else None
                errors = None if errors is None or found is None else errors + found
                done(step, sanitizer_errors=errors)

        def benchmark(name: str, module: str, result: str, margin_s: float, options: list[str]) -> None:
            """A benchmark under its own budget, ``margin_s`` inside the step's time (one measurement takes
            seconds), so that it ends in time to save ``result``; an earlier run's is removed first, so
            that the summary below is this run's or none."""
            budget = max(1.0, min(BENCHMARK_CAP_S, runner.left()) - margin_s)
            (out / result).unlink(missing_ok=True)
            done(runner.run(name, [py, "-m", module, "--device", "cpu" if args.cpu else "cuda", *options,
                                   "--budget-s", f"{budget:.0f}", "--json", str(out / result)], BENCHMARK_CAP_S))

        if "bench" in steps:
            # a dry run tries the script on one size
            benchmark("bench", "benchmarks.compressor_bench", "bench.json", 45, [
                "--sizes", "20" if args.cpu else ",".join(map(str, range(20, args.bench_max_log2 + 1, 2))),
                "--repeats", "3" if args.cpu else "20", *(["--rotate-mib", "16"] if args.cpu else []),
                *(["--compressors", args.bench_compressors] if args.bench_compressors else [])])
        if "costs" in steps:
            benchmark("costs", "benchmarks.step_costs", "step_costs.json", 60,
                      ["--size", "small", "--steps", "3"] if args.cpu else [])
    bench = _json(out / "bench.json")
    if "bench" in steps and bench:
        missed = [g["label"] + f" 2^{g['n'].bit_length() - 1}" for g in bench["goals"] if g["met"] is False]
        print("bench: copy " + ", ".join(f"2^{c['n'].bit_length() - 1} {c['copy_gbps']:.0f} GB/s" for c in bench["copy"])
              + f"; goals met {sum(g['met'] is True for g in bench['goals'])} of {len(bench['goals'])}"
              + (f", missed: {', '.join(missed)}" if missed else "")
              + (f"; {bench['not_measured']} measurements not made" if bench["not_measured"] else ""))
    costs = _json(out / "step_costs.json")
    if "costs" in steps and costs:
        failed = [f"{r['model']} {r['compressor']}" for r in costs["rows"] if r["status"] == "failed"]
        print(f"costs: {len(costs['rows'])} runs" + (f", failed: {', '.join(failed)}" if failed else "")
              + (f"; {costs['not_measured']} runs not made" if costs["not_measured"] else ""))
    print(record["device"], "|", record["facts"])
    print(f"{'step':20} {'ok':4} {'seconds':>8}  last line")
    for s in record["steps"]:
        print(f"{s['step']:20} {'yes' if s['ok'] else 'NO':4} {s['seconds']:8.1f}  {s['last_line'][:90]}")
    print({k: record[k] for k in ("tests_passed", "tests_failed", "sanitizer_errors", "world_ok", "training_ok")})
    raise SystemExit(0 if all(s["ok"] for s in record["steps"]) else 1)


if __name__ == "__main__":
    main()
