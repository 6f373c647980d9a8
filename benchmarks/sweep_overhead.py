"""Sweep overhead benchmark: the seconds a sweep spends outside its trials' training, per trial.

Runs a sweep (default: the quickstart, 36 trials on 1 and 2 workers) ``--repeats`` times through the
command line, each into a fresh results folder, and reports per run: the wall time of
``python -m orchestrator run`` (Ray's start, every trial, the tables and plots at the end), the sum of
the trials' ``train_time_s`` (seconds in training steps), and the overhead per trial
(wall - training) / trials, which counts Ray's start, the workers' start, evaluation, recording and
the final export; the median over runs is the figure.

    python -m benchmarks.sweep_overhead --repeats 3 --json benchmarks/results/sweep_overhead/quickstart.json

Run it on an otherwise idle machine: the trials share its cores with nothing else.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.study import env_info
from orchestrator.study.records import read_records, write_atomic

ROOT = Path(__file__).resolve().parent.parent


def one_run(sweep: Path) -> dict:
    """Run ``sweep`` once into a fresh folder; its wall time, training time and trial count."""
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "results"
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(sweep), "--results", str(results)],
                              cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"the sweep failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        records = read_records(results)
        train = sum(r["history"][-1]["train_time_s"] for r in records if r.get("history"))
    return {"wall_s": wall, "train_s": train, "trials": len(records),
            "overhead_per_trial_s": (wall - train) / len(records)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, default=ROOT / "sweeps" / "quickstart.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="where to save the runs and the machine's facts")
    args = parser.parse_args(argv)
    runs = []
    for i in range(args.repeats):
        runs.append(one_run(args.sweep.resolve()))
        r = runs[-1]
        print(f"run {i + 1}: {r['trials']} trials, wall {r['wall_s']:.1f} s, training {r['train_s']:.1f} s, "
              f"overhead {r['overhead_per_trial_s']:.2f} s per trial", flush=True)
    median = {key: statistics.median(r[key] for r in runs) for key in ("wall_s", "train_s", "overhead_per_trial_s")}
    print(f"\n| sweep | trials | runs | wall (s) | training (s) | overhead per trial (s) |\n|---|---|---|---|---|---|\n"
          f"| {args.sweep.name} | {runs[0]['trials']} | {len(runs)} | {median['wall_s']:.1f} | {median['train_s']:.1f} | "
          f"{median['overhead_per_trial_s']:.2f} |\n(medians over the runs)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        try:
            sweep_name = args.sweep.resolve().relative_to(ROOT).as_posix()
        except ValueError:
            sweep_name = args.sweep.name
        write_atomic(args.json, json.dumps({
            "command": "python -m benchmarks.sweep_overhead " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": datetime.date.today().isoformat(), "sweep": sweep_name,
            "environment": env_info.collect(), "runs": runs, "median": median}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
