"""How far the step-time predictions of a sweep on an emulated cluster are from its measured steps.

Reads a results folder's ``trials.csv`` as the results export wrote it (``predicted_step_time_s``
beside ``step_time_s``, predicted from the sweep's own calibration trials: docs/predictor.md) and prints,
per cell (configuration, workers, bandwidth, overlap), the median measured and predicted step over
its trials (seeds) and the error, then the median |error| over the cells, per bandwidth and in all.

    python -m benchmarks.predicted_vs_measured benchmarks/results/hierarchy \\
        --json benchmarks/results/hierarchy/predicted_vs_measured.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.study.records import write_atomic

CELL = ["configuration", "num_workers", "bandwidth", "overlap"]


def cells(trials: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per predicted cell of ``trials`` (trials.csv): medians over its ok trials, and the error."""
    ok = trials[(trials["status"] == "ok") & trials["predicted_step_time_s"].notna()].copy()
    ok["configuration"] = ok["name"].str.replace(r" (bandwidth|num_workers|seed)=\S+", "", regex=True)
    rows = []
    for key, group in ok.groupby(CELL, sort=False):
        measured = statistics.median(group["step_time_s"])
        predicted = statistics.median(group["predicted_step_time_s"])
        configuration, workers, bandwidth, overlap = key
        rows.append({"configuration": configuration, "num_workers": int(workers), "bandwidth": str(bandwidth),
                     "overlap": bool(overlap), "trials": len(group), "measured_s": float(measured),
                     "predicted_s": float(predicted), "error": float(predicted / measured - 1)})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median |error| over the cells, per bandwidth and in all (NaN where there are none)."""
    def median(errors: list[float]) -> float:
        return statistics.median(errors) if errors else math.nan

    bandwidths = dict.fromkeys(r["bandwidth"] for r in rows)
    return {"cells": len(rows), "median_abs_error": median([abs(r["error"]) for r in rows]),
            "by_bandwidth": {str(b): median([abs(r["error"]) for r in rows if r["bandwidth"] == b])
                             for b in bandwidths}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a results folder of a sweep on an emulated cluster")
    parser.add_argument("--json", type=Path, help="where to save the cells and the summary")
    args = parser.parse_args(argv)
    rows = cells(pd.read_csv(args.results / "trials.csv"))
    print("| configuration | workers | bandwidth | overlap | trials | measured (ms) | predicted (ms) | error |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['configuration']} | {r['num_workers']} | {r['bandwidth']} | {str(r['overlap']).lower()} | "
              f"{r['trials']} | {1e3 * r['measured_s']:.1f} | {1e3 * r['predicted_s']:.1f} | {100 * r['error']:+.1f}% |")
    found = summary(rows)
    by = ", ".join(f"{b} {100 * e:.1f}%" for b, e in found["by_bandwidth"].items())
    print(f"median |error| {100 * found['median_abs_error']:.1f}% over {found['cells']} cells ({by})")
    if args.json:
        write_atomic(args.json, json.dumps({"results": str(args.results), "cells": rows, "summary": found}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
