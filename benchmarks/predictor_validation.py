"""Validate the performance model: predicted against measured step time on an emulated cluster.

The grid (``sweeps/predictor_grid.yaml``: 2 and 4 hosts x 100 Mbit/s and 1 Gbit/s x six methods x
overlap on/off) is predicted from the one-worker trials of another folder
(``sweeps/predictor_inputs.yaml``, same model, same emulated cluster) and each grid trial's
calibrated link, never from the grid's own runs (``orchestrator.predict.emulated.trial_predictions``).
Per cell: measured and predicted median step time, the relative error, and the speedup against
fp32 of the same workers, bandwidth and overlap, measured and predicted (its sign: faster or not).
With the hosts sharing this machine's cores as the model guesses (``emulated_compute_scale``), as if
each host had the cores to itself (what the model assumes of a real cluster), with ``--contention``
(``benchmarks/host_contention.py``'s figures: the one-worker trials run k at once, outside Ray and
the namespaces) and with ``--sharing`` (``sweeps/predictor_sharing.yaml``: the configurations at k
workers over links about as fast as the machine can feed, as trials: device scales, the links'
latency per message under that load and the machine's busy time per step, ``sharing_inputs``; scored
with the busy time as a floor, "sharing in trials, busy machine", and without); the table and
per-phase ratios are of the last of these given.

    sudo lowprec run sweeps/predictor_inputs.yaml --results results/predictor_inputs
    sudo lowprec run sweeps/predictor_sharing.yaml --results results/predictor_sharing
    sudo lowprec run sweeps/predictor_grid.yaml --results results/predictor_grid
    python -m benchmarks.predictor_validation --inputs results/predictor_inputs \\
        --sharing results/predictor_sharing --grid results/predictor_grid --json validation.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from orchestrator.study import env_info
from orchestrator.predict import measure
from orchestrator.predict.emulated import TrialInputs, trial_predictions
from orchestrator.predict.sharing import finite_median, measured_scales, sharing_inputs
from orchestrator.predict.trials import Trials, config_name, configurations, read_trials


PHASES = ("compute_s", "encode_s", "comm_s", "decode_s")


def cells(runs: list[tuple[Trials, dict[str, dict[str, float]]]]) -> list[dict[str, Any]]:
    """One row per predicted grid cell, with its speedup against the fp32 cell of its group. ``runs``:
    each run of the grid with its predictions (each from that run's calibrated links); a cell run more
    than once is scored by its medians (measured and predicted step time, each phase, the steal)."""
    repeats: dict[tuple, list[dict[str, Any]]] = {}
    for grid, predicted in runs:
        for record, row in grid:
            s = record["settings"]
            if record["trial_id"] not in predicted:
                continue
            guess = predicted[record["trial_id"]]
            cell = (config_name(s), s["num_workers"], s["bandwidth"], bool(s["overlap"]))
            repeats.setdefault(cell, []).append({
                "measured_s": float(row["step_time_s"]), "predicted_s": guess["predicted_step_time_s"],
                # per phase, measured / predicted; the phases add up without overlap
                **{phase: float(row[phase]) / guess[phase] if guess[phase] else math.nan for phase in PHASES},
                "comm_excess_s": float(row["comm_s"]) - guess["comm_s"],
                # the hypervisor's share of the machine while the trial ran (NaN: not recorded)
                "steal": float(row.get("cpu_steal_share", math.nan)),
                "compressor": s["compressor"], "algorithm": s["algorithm"]})
    rows = []
    for (configuration, workers, bandwidth, overlap), found in repeats.items():
        def median(name: str) -> float:  # of the repeats that have the figure (steal: not every run recorded it)
            return finite_median(f[name] for f in found)
        rows.append({"configuration": configuration, "compressor": found[0]["compressor"],
                     "algorithm": found[0]["algorithm"], "num_workers": workers, "bandwidth": bandwidth,
                     "overlap": overlap, "repeats": len(found), "measured_s": median("measured_s"),
                     "predicted_s": median("predicted_s"), "phases": {phase: median(phase) for phase in PHASES},
                     "comm_excess_s": median("comm_excess_s"), "steal": median("steal")})
    groups: dict[tuple, dict[str, Any]] = {}
    for cell in rows:
        if cell["compressor"] == "fp32":
            groups[(cell["num_workers"], cell["bandwidth"], cell["overlap"])] = cell
    for cell in rows:
        cell["error"] = cell["predicted_s"] / cell["measured_s"] - 1
        base = groups.get((cell["num_workers"], cell["bandwidth"], cell["overlap"]))
        cell["measured_speedup"] = base["measured_s"] / cell["measured_s"] if base else math.nan
        cell["predicted_speedup"] = base["predicted_s"] / cell["predicted_s"] if base else math.nan
    return sorted(rows, key=lambda c: (c["num_workers"], c["bandwidth"], not c["overlap"], c["configuration"]))


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    signed = [c for c in rows if c["compressor"] != "fp32" and math.isfinite(c["measured_speedup"])]
    right = [c for c in signed if (c["measured_speedup"] > 1) == (c["predicted_speedup"] > 1)]
    return {"cells": len(rows), "median_abs_error": statistics.median(abs(c["error"]) for c in rows),
            "sign_cells": len(signed), "sign_right": len(right), "sign_right_share": len(right) / len(signed)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=Path, nargs="+", required=True,
                        help="results folders of the one-worker trials (repeats: each phase's median is taken)")
    parser.add_argument("--grid", type=Path, nargs="+", required=True,
                        help="results folders of the grid (repeats: each cell is scored by its medians)")
    parser.add_argument("--contention", type=Path, help="benchmarks/host_contention.py's JSON: measured sharing")
    parser.add_argument("--sharing", type=Path, nargs="+",
                        help="results folders of sweeps/predictor_sharing.yaml: sharing measured in trials")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    grids = [(read_trials(folder), json.loads((folder / "environment.json").read_text())["cpu_count"])
             for folder in args.grid]
    inputs = [t for folder in args.inputs for t in read_trials(folder)]

    rate = measure.reduction_rate()  # one figure for every prediction of this run

    def scored(**model: Any) -> list[dict[str, Any]]:
        return cells([(grid, trial_predictions(grid, TrialInputs(inputs, rate, **model))) for grid, _ in grids])

    runs = {"shared cores": cells([(grid, trial_predictions(grid, TrialInputs(inputs, rate, cpu_count=cpu_count)))
                                   for grid, cpu_count in grids]),
            "own cores": scored()}
    if args.contention:
        scales = measured_scales(json.loads(args.contention.read_text()), configurations(inputs)[0])
        runs["measured sharing"] = scored(scales=scales)
    sharing_figures = None
    if args.sharing:
        measured = sharing_inputs([t for folder in args.sharing for t in read_trials(folder)], inputs, rate)
        scales, latency, busy = measured.scales, measured.latency, measured.busy
        sharing_figures = {"latency_s": [{"key": list(key), "num_workers": k, "latency_s": a}
                                         for (key, k), a in latency.items()],
                           "scales": [{"key": list(key), "num_workers": k, **vars(scale)}
                                      for (key, k), scale in scales.items()],
                           "busy_s": [{"key": list(key), "num_workers": k, "overlap": on, "busy_s": t}
                                      for (key, k, on), t in busy.items()]}
        print("latency per message under load: " + ", ".join(f"{key[1]} {k} workers {a * 1e3:.2f} ms"
                                                             for (key, k), a in sorted(latency.items())))
        runs["sharing in trials"] = scored(scales=scales, latency=latency)
        if busy:
            print("machine busy per step: " + ", ".join(
                f"{key[1]} {k} workers overlap {'on' if on else 'off'} {t * 1e3:.0f} ms"
                for (key, k, on), t in sorted(busy.items())))
            runs["sharing in trials, busy machine"] = scored(scales=scales, latency=latency, busy=busy)
    primary = next(name for name in ("sharing in trials, busy machine", "sharing in trials", "measured sharing",
                                     "shared cores") if name in runs)
    shared = runs[primary]
    own = {(c["configuration"], c["num_workers"], c["bandwidth"], c["overlap"]): c for c in runs["own cores"]}
    print("| hosts | bandwidth | overlap | configuration | measured (ms) | predicted (ms) | error | speedup "
          "measured | predicted | error, own cores | CPU steal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in shared:
        alone = own[(c["configuration"], c["num_workers"], c["bandwidth"], c["overlap"])]
        steal = f"{c['steal']:.1%}" if math.isfinite(c["steal"]) else "–"
        print(f"| {c['num_workers']} | {c['bandwidth']} | {'on' if c['overlap'] else 'off'} | {c['configuration']} "
              f"| {c['measured_s'] * 1e3:.0f} | {c['predicted_s'] * 1e3:.0f} | {c['error']:+.0%} "
              f"| {c['measured_speedup']:.2f}x | {c['predicted_speedup']:.2f}x | {alone['error']:+.0%} "
              f"| {steal} |")
    print(f"\nWithout overlap the phases add up; measured / predicted per phase ({primary}), median over the "
          "compressed configurations (sra):")
    print("| hosts | bandwidth | compute | encode | comm | decode | comm - predicted (ms) |")
    print("|---|---|---|---|---|---|---|")
    for hosts in sorted({c["num_workers"] for c in shared}):
        for bandwidth in sorted({c["bandwidth"] for c in shared}):
            part = [c for c in shared if c["num_workers"] == hosts and c["bandwidth"] == bandwidth
                    and not c["overlap"] and c["algorithm"] == "sra"]
            if part:
                ratio = {k: statistics.median(c["phases"][k] for c in part) for k in PHASES}
                excess = statistics.median(c["comm_excess_s"] for c in part)
                print(f"| {hosts} | {bandwidth} | {ratio['compute_s']:.2f} | {ratio['encode_s']:.2f} | "
                      f"{ratio['comm_s']:.2f} | {ratio['decode_s']:.2f} | {excess * 1e3:.0f} |")
    figures = {name: summary(rows) for name, rows in runs.items()}
    by_group = {}
    for hosts in sorted({c["num_workers"] for c in shared}):
        for bandwidth in sorted({c["bandwidth"] for c in shared}):
            part = [c for c in shared if c["num_workers"] == hosts and c["bandwidth"] == bandwidth]
            if part:
                by_group[f"{hosts} hosts {bandwidth}"] = summary(part)
    for name, fig in {**figures, **by_group}.items():
        print(f"{name}: median |error| {fig['median_abs_error']:.1%} over {fig['cells']} cells; speedup sign right "
              f"in {fig['sign_right']} of {fig['sign_cells']} ({fig['sign_right_share']:.0%})")
    if args.json:
        args.json.write_text(json.dumps({"environment": env_info.collect(), "inputs": [str(p) for p in args.inputs],
                                         "grid": [str(p) for p in args.grid],
                                         "contention": str(args.contention) if args.contention else None,
                                         "sharing": [str(p) for p in args.sharing or []],
                                         "sharing_inputs": sharing_figures,
                                         "summary": figures, "by_group": by_group, "cells": runs}, indent=1))
        print(f"saved {args.json}")


if __name__ == "__main__":
    main()
