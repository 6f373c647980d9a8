"""Predict each configuration of a results folder on another cluster (``lowprec predict``/``advise``).

Inputs, all measured by the tool, never fitted to runs on the target:
- per configuration, its one-worker trial (``num_workers: 1``): compute, encode and decode time
  per step (medians, trials.csv), on the machine that ran it;
- the model's step profile on this machine (``orchestrator.profile``): forward/backward/optimizer
  split and when each gradient is ready, scaled to the fp32 one-worker trial's compute time;
- DDP's buckets (reverse parameter order; 1 MiB first, then ``bucket_cap_mb``, default 25 MiB);
- exact payload sizes from the compressors (sra's chunks as ``compressors.collectives`` cuts them);
- the target link (``--bandwidth``, ``--latency``) and this machine's reduction throughput.

Encode and decode at p workers from the one-worker figures: sra encodes n + n/p elements per step
(n + n with one worker) and decodes 2n either way; allgather encodes n and decodes p n.
Time to accuracy: speedup x (fp32's steps to the target / the configuration's), both measured with
the most workers in the folder. PowerSGD and trials run on GPUs are not modelled (say so, skip).
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

import compressors
from compressors import collectives

from . import perfmodel
from .labels import config_label
from .profile import Profile, profile
from .records import read_records

FIRST_BUCKET_BYTES = 1024 * 1024  # DDP's first bucket (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES)
DEFAULT_BUCKET_CAP_MB = 25
CAST_ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2}
COLUMNS = ["configuration", "compressor", "algorithm", "num_workers", "bandwidth_bps", "latency_s", "mode",
           "predicted_step_time_s", "compute_s", "comm_s", "encode_s", "decode_s", "speedup_vs_fp32",
           "speedup_vs_16bit", "steps_ratio_vs_fp32", "tta_speedup_vs_fp32", "break_even_bps", "speedup_bound"]


_LATENCY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(s|ms|us|ns)")
_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def latency_s(text: str) -> float:
    """``5us``, ``0.2ms``, ``0s``: seconds; ValueError names the valid form."""
    match = _LATENCY.fullmatch(text.strip().lower())
    if not match:
        raise ValueError(f"latency must be a number with a unit s, ms, us or ns (5us, 0.2ms), got {text!r}")
    return float(match.group(1)) * _UNIT[match.group(2)]


@dataclass(frozen=True)
class Config:
    """One configuration of the folder and what its one-worker trial measured."""
    label: str
    settings: dict[str, Any]
    compute_s: float
    encode_s: float
    decode_s: float


def _trials(results: Path) -> list[tuple[dict[str, Any], pd.Series]]:
    """Every finished trial of the folder: its record and its trials.csv row, read once."""
    table = pd.read_csv(results / "trials.csv").set_index("trial_id")
    return [(r, table.loc[r["trial_id"]]) for r in read_records(results) if r["status"] == "ok"]


def _key(settings: dict[str, Any]) -> str:
    params = settings["compressor_params"] or {}
    return config_label({**settings, **params}, [*params, "algorithm"])


def configurations(trials: list[tuple[dict[str, Any], pd.Series]]) -> tuple[list[Config], list[str]]:
    """The configurations that can be predicted, and why the others cannot."""
    found: dict[str, Config] = {}
    why: dict[str, str] = {}
    for record, row in trials:
        s = record["settings"]
        label = _key(s)
        if s["compressor"] == "powersgd" or s["use_gpu"]:
            why[label] = f"{'PowerSGD' if s['compressor'] == 'powersgd' else 'a GPU trial'} is not modelled"
        elif s["num_workers"] == 1 and label not in found:
            found[label] = Config(label, s, float(row["compute_s"]), float(row["encode_s"]), float(row["decode_s"]))
    for record, _ in trials:
        label = _key(record["settings"])
        if label not in found:
            why.setdefault(label, "no finished one-worker trial")
    return list(found.values()), [f"{label}: {text}" for label, text in why.items()]


def steps_to_target(trials: list[tuple[dict[str, Any], pd.Series]]) -> dict[str, float]:
    """Per configuration, the steps to the target accuracy in its trial with the most workers
    (time to accuracy over median step time; NaN where the target was not reached)."""
    best: dict[str, tuple[int, float]] = {}
    for record, row in trials:
        s = record["settings"]
        if s["num_workers"] < 2:
            continue
        steps = float(row["time_to_accuracy_s"]) / float(row["step_time_s"])
        label = _key(s)
        if label not in best or s["num_workers"] > best[label][0]:
            best[label] = (s["num_workers"], steps)
    return {label: steps for label, (_, steps) in best.items()}


def reduce_bps(numel: int = 1 << 22, repeats: int = 5) -> float:
    """This machine's summing throughput (bytes of one operand per second): the ring's reduction."""
    a, b = torch.ones(numel), torch.ones(numel)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        a.add_(b)
        times.append(time.perf_counter() - t0)
    return 4 * numel / sorted(times[1:])[repeats // 2]


def buckets_of(shapes: list[tuple[int, ...]], bucket_cap_mb: float | None) -> list[list[int]]:
    """DDP's buckets as parameter indices, in the order they are reduced: parameters in reverse,
    a bucket closed once it holds at least its limit (1 MiB for the first, then the cap), as
    torch's compute_bucket_assignment_by_size does."""
    cap = (bucket_cap_mb or DEFAULT_BUCKET_CAP_MB) * 1024 * 1024
    out: list[list[int]] = [[]]
    size, limit = 0, FIRST_BUCKET_BYTES
    for i in reversed(range(len(shapes))):
        out[-1].append(i)
        size += 4 * math.prod(shapes[i])
        if size >= limit:
            out.append([])
            size, limit = 0, cap
    return [b for b in out if b]


# One bucket's traffic: (collective, bytes) in the order they run; bytes are what perfmodel's cost
# of that collective takes (ring: the buffer; all_gather: one rank's payload; all_to_all: what a rank sends).
Traffic = list[tuple[str, float]]


def bucket_traffic(config: Config, shapes: list[tuple[int, ...]], p: int) -> Traffic:
    """What one bucket (parameter ``shapes``) puts on the wire with ``p`` workers."""
    s = config.settings
    name, algorithm = s["compressor"], s["algorithm"]
    if algorithm == "allreduce":
        return [("ring", CAST_ITEMSIZE[name] * sum(math.prod(x) for x in shapes))]
    small = [x for x in shapes if math.prod(x) < s["min_compress_numel"]]
    large = [x for x in shapes if math.prod(x) >= s["min_compress_numel"]]
    traffic: Traffic = [("ring", 4 * sum(math.prod(x) for x in small))]
    if not large:
        return traffic
    codec = compressors.get(name, **(s["compressor_params"] or {}))
    if algorithm == "allgather":
        return traffic + [("all_gather", sum(codec.payload_nbytes(x) for x in large))]
    to_rank = [0] * p  # sra: payload bytes of each rank's chunks, as collectives.sra_compressed cuts them
    for key, x in enumerate(large):
        axis = collectives.chunk_axis(x, codec)
        for r, bounds in enumerate(collectives.split(x, p, key, axis)):
            to_rank[r] += codec.payload_nbytes(collectives.chunk_shape(x, bounds, axis))
    traffic.append(("all_to_all", sum(to_rank[1:])))
    if codec.scales_by_tensor:
        traffic.append(("ring", 4 * len(large)))
    return traffic + [("all_gather", max(to_rank))]


def comm_s(traffic: Traffic, p: int, link: perfmodel.Link, reduce: float) -> float:
    costs = {"ring": lambda n: perfmodel.ring_allreduce_s(n, p, link, reduce),
             "all_gather": lambda n: perfmodel.allgather_s(n, p, link),
             "all_to_all": lambda n: perfmodel.alltoall_s(n, p, link)}
    return sum(costs[kind](nbytes) for kind, nbytes in traffic)


@dataclass(frozen=True)
class Plan:
    """A configuration's step at ``p`` workers, all but the link: fwd/bwd/opt and per bucket its
    ready time, encode, decode and traffic (so a bandwidth sweep costs arithmetic only)."""
    fwd_s: float
    bwd_s: float
    opt_s: float
    buckets: list[tuple[float, float, float, Traffic]]
    encode_s: float
    decode_s: float
    mode: str


def plan(config: Config, prof: Profile, compute_s: float, p: int) -> Plan:
    s = config.settings
    shapes = [shape for shape, _ in prof.params]
    scale = compute_s / (prof.fwd_s + prof.bwd_s + prof.opt_s)
    compressible = [math.prod(x) if math.prod(x) >= s["min_compress_numel"] else 0 for x in shapes]
    total = sum(compressible) or 1
    encode, decode = config.encode_s, config.decode_s
    if s["algorithm"] == "sra":
        encode *= (1 + 1 / p) / 2
    elif s["algorithm"] == "allgather":
        decode *= p
    buckets = []
    for idx in buckets_of(shapes, s["bucket_cap_mb"]):
        share = sum(compressible[i] for i in idx) / total
        ready = max(prof.params[i][1] for i in idx) * scale
        buckets.append((ready, encode * share, decode * share, bucket_traffic(config, [shapes[i] for i in idx], p)))
    return Plan(prof.fwd_s * scale, prof.bwd_s * scale, prof.opt_s * scale, buckets, encode, decode,
                "overlap" if s["overlap"] else "serial")


def predict_step(step: Plan, p: int, link: perfmodel.Link, reduce: float) -> dict[str, float]:
    """Predicted step of a planned configuration over ``link``."""
    buckets = [perfmodel.Bucket(ready, enc, comm_s(traffic, p, link, reduce), dec)
               for ready, enc, dec, traffic in step.buckets]
    time_s = perfmodel.step_time(step.fwd_s, step.bwd_s, step.opt_s, buckets, step.mode)
    return {"predicted_step_time_s": time_s, "compute_s": step.fwd_s + step.bwd_s + step.opt_s,
            "comm_s": sum(b.comm_s for b in buckets), "encode_s": step.encode_s, "decode_s": step.decode_s,
            "mode": step.mode}


def predict(results: Path, bandwidth_bps: float, num_workers: int, latency_s: float,
            prof: Profile | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Every predictable configuration of ``results`` on ``num_workers`` workers with links of
    ``bandwidth_bps`` bits/s and ``latency_s``; the notes say what was skipped and why."""
    trials = _trials(results)
    configs, notes = configurations(trials)
    fp32 = next((c for c in configs if c.settings["compressor"] == "fp32" and c.settings["algorithm"] == "allreduce"), None)
    if fp32 is None:
        raise ValueError(f"{results}: no finished one-worker fp32 trial (plain DDP): the baseline and the "
                         "compute time come from it")
    prof = prof or profile(fp32.settings)
    reduce = reduce_bps()
    steps = steps_to_target(trials)
    plans = {c.label: plan(c, prof, fp32.compute_s, num_workers) for c in configs}

    def step_at(config: Config, bps: float) -> dict[str, float]:
        return predict_step(plans[config.label], num_workers, perfmodel.Link(bps / 8, latency_s), reduce)

    base = step_at(fp32, bandwidth_bps)["predicted_step_time_s"]
    half = next((c for c in configs if c.settings["compressor"] == "fp16" and c.settings["algorithm"] == "allreduce"), None)
    half_step = step_at(half, bandwidth_bps)["predicted_step_time_s"] if half else math.nan
    rows = []
    for config in configs:
        out = step_at(config, bandwidth_bps)
        step = out["predicted_step_time_s"]
        ratio = steps[fp32.label] / steps[config.label] if fp32.label in steps and config.label in steps else math.nan
        even = math.nan
        if config is not fp32:
            def faster(bps: float, c: Config = config) -> bool:
                return step_at(c, bps)["predicted_step_time_s"] < step_at(fp32, bps)["predicted_step_time_s"]
            edge = perfmodel.break_even(faster, 1e6, 1e12)
            even = math.inf if edge == 1e12 else (0.0 if edge == 1e6 else edge)
        rows.append({"configuration": config.label, "compressor": config.settings["compressor"],
                     "algorithm": config.settings["algorithm"], "num_workers": num_workers,
                     "bandwidth_bps": bandwidth_bps, "latency_s": latency_s, **out,
                     "speedup_vs_fp32": base / step, "speedup_vs_16bit": half_step / step,
                     "steps_ratio_vs_fp32": ratio, "tta_speedup_vs_fp32": base / step * ratio,
                     "break_even_bps": even, "speedup_bound": perfmodel.speedup_bound(base, fp32.compute_s)})
    return pd.DataFrame(rows, columns=COLUMNS), notes


def advice(table: pd.DataFrame) -> str:
    """The best configuration for that cluster and why, or that none pays."""
    by = "tta_speedup_vs_fp32" if table["tta_speedup_vs_fp32"].notna().any() else "speedup_vs_fp32"
    ranked = table[table["compressor"] != "fp32"].dropna(subset=[by]).sort_values(by, ascending=False)
    bound = float(table["speedup_bound"].iloc[0])
    basis = "in time to accuracy" if by == "tta_speedup_vs_fp32" else "per step (no steps-to-target measured)"
    if ranked.empty or float(ranked[by].iloc[0]) <= 1.0:
        return (f"none pays: no configuration beats fp32 {basis} on this cluster (the bound for any "
                f"compressor is {bound:.2f}x: fp32's exposed communication is small)")
    best = ranked.iloc[0]
    return (f"{best['configuration']}: {best[by]:.2f}x fp32 {basis} (per step {best['speedup_vs_fp32']:.2f}x; "
            f"the bound for any compressor is {bound:.2f}x; it pays below {best['break_even_bps'] / 1e9:.3g} Gbit/s)")
