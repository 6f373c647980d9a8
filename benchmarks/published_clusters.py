"""The predictor against published clusters: each published multi-GPU step predicted from its model and the
same source's one-GPU step time (``lowprec predict --model ... --step_time``'s path,
orchestrator/predict/from_step.py), fp32 data parallelism over the source's links, beside what was published.

Inputs: ``benchmarks/results/published/clusters.csv``, one row per published point: its source (citation,
URL, where in it, whether the figure is stated or derived from stated throughputs), the setting (model as
ours builds it, per-GPU batch, GPUs, GPUs per node, each node's link to the others in Gbit/s, the latency
taken for it, the link inside a node) and the one-GPU and published step times in seconds. Where a source
gives throughput, step = per-GPU batch x GPUs / throughput.

Each model's profile is measured here once, at ``--profile_batch`` samples (the profile gives the split of
the step and when each gradient is ready; its length is scaled to the one-GPU step), the reduction rate
once, scaled as predict scales it. Each row is predicted at the nominal links with overlap, at every
``--slowdowns`` (the compute's slowdown beside communication: 0, and Lee et al. 2025's 18.9% measured on
GPUs, docs/predictor.md). Error = (predicted - published) / published. Table printed, JSON saved.

    python -m benchmarks.published_clusters --out benchmarks/results/published/predictions.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import yaml

from orchestrator.predict import from_step, measure, options
from orchestrator.predict.plan import cluster
from orchestrator.study.records import write_atomic

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = ROOT / "benchmarks" / "results" / "published" / "clusters.csv"


def model_of(row: pd.Series, batch: int) -> from_step.Model:
    return from_step.Model(row["model"], yaml.safe_load(row["model_options"]) or {},
                           tuple(int(v) for v in str(row["input_shape"]).split(",")), int(row["num_classes"]), batch)


def predict_row(row: pd.Series, prof: Any, rate: float, slowdown: float) -> float:
    """The predicted fp32 step of a published point."""
    per_node = min(int(row["gpus"]), int(row["gpus_per_node"]))
    target = cluster(int(row["gpus"]), per_node, row["inter_gbit"] * 1e9, options.latency_s(row["latency"]),
                     row["intra_gbit"] * 1e9)
    table, _ = from_step.predict_from_step(model_of(row, 1), float(row["one_gpu_step_s"]), [], target,
                                           overlap_slowdown=slowdown, prof=prof, reduction_rate=rate)
    return float(table["predicted_step_time_s"].iloc[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", type=Path, default=CLUSTERS, help="the published points (CSV)")
    parser.add_argument("--profile_batch", type=int, default=4, help="samples of the profile measured here")
    parser.add_argument("--slowdowns", default="0,0.189", help="overlap slowdowns, comma separated")
    parser.add_argument("--out", type=Path, default=None, help="JSON written here")
    args = parser.parse_args(argv)
    points = pd.read_csv(args.clusters, dtype={"input_shape": str})
    slowdowns = [float(s) for s in args.slowdowns.split(",")]
    rate = measure.reduction_rate()
    profiles = {}
    for key, first in points.groupby(["model", "model_options", "input_shape", "num_classes"]).first().iterrows():
        row = pd.Series(dict(zip(("model", "model_options", "input_shape", "num_classes"), key)) | first.to_dict())
        print(f"profiling {row['model']} {row['model_options']} at {args.profile_batch} samples ...", file=sys.stderr)
        profiles[key] = from_step.profile_here(model_of(row, args.profile_batch))
    rows = []
    for _, row in points.iterrows():
        prof = profiles[(row["model"], row["model_options"], row["input_shape"], row["num_classes"])]
        out = {"id": row["id"], "model": row["model"], "gpus": int(row["gpus"]), "gpus_per_node": int(row["gpus_per_node"]),
               "inter_gbit": float(row["inter_gbit"]), "one_gpu_step_s": float(row["one_gpu_step_s"]),
               "published_step_s": float(row["published_step_s"])}
        for s in slowdowns:
            predicted = predict_row(row, prof, rate, s)
            out[f"predicted_s_slow{s:g}"] = predicted
            out[f"error_slow{s:g}"] = (predicted - out["published_step_s"]) / out["published_step_s"]
        rows.append(out)
    table = pd.DataFrame(rows)
    summary = {f"median_abs_error_slow{s:g}": statistics.median(abs(e) for e in table[f"error_slow{s:g}"])
               for s in slowdowns}
    shown = table.assign(**{c: table[c].map(lambda v: f"{v:+.1%}") for c in table if c.startswith("error")})
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for name, value in summary.items():
        print(f"{name}: {value:.1%} over {len(table)} points")
    if args.out:
        write_atomic(args.out, json.dumps({
            "date": datetime.date.today().isoformat(), "machine": f"{platform.processor() or platform.machine()}, "
            f"{torch.get_num_threads()} threads", "command": "python -m benchmarks.published_clusters "
            + " ".join(argv if argv is not None else sys.argv[1:]), "profile_batch": args.profile_batch,
            "reduction_rate_here_bps": rate, "summary": summary,
            "rows": [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]},
            indent=1) + "\n")
        print(f"# saved {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
