"""Predict from what a user knows (``lowprec predict --model ... --step_time T``): a model, its batch and its
step on one device of the target; no results folder, no trial.

- The gradient's layout: the model's parameters, built on the meta device (no memory, no time).
- The step's profile (forward, backward, optimizer, when each gradient is ready): measured here on a random
  batch of ``input_shape`` and scaled to ``step_time``, as a folder's profile is scaled to its fp32 trial.
- Each configuration's one-worker times as a trial would record them: the casts' (fp16, bf16) device work,
  the codecs' encodes and decodes (an sra trial on one worker encodes and decodes the compressible elements
  twice, an allgather one, DGC's, once), from the codec's speed in GB/s of float32 input: a recorded kernel table
  of the target's device (``codec_table``: a ``benchmarks/compressor_bench.py`` JSON), or measured here and
  scaled as the step is (this machine's step over ``step_time``); a note says which.
- The reduction rate: measured here and scaled the same way.

The table's step columns are the folder path's (``predictor.stepper``, ``predictor.step_columns``): given
the same configurations, profile and rate, both give the same predictions. What the study would measure
(steps to a target, accuracy) is not known here: the speedups are per step.
"""
from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

import compressors
import workloads
from compressors.core.registry import default_algorithm, hook_only, optimizer_method

from . import measure, perfmodel
from .plan import DeviceScale
from .predictor import step_columns, stepper
from .profile import Profile, profile_model
from .traffic import CAST_ITEMSIZE
from .trials import Configuration

COLUMNS = ["configuration", "compressor", "algorithm", "num_workers", "workers_per_host", "bandwidth_bps",
           "intra_bandwidth_bps", "latency_s", "overlap", "overlap_slowdown", "step_time_s",
           "predicted_step_time_s", "compute_s", "comm_s", "encode_s", "decode_s", "speedup_vs_fp32",
           "speedup_vs_16bit", "break_even_bps", "speedup_bound"]
MIN_COMPRESS_NUMEL = 1024  # the setting's default: smaller tensors travel in one fp32 all_reduce
_MEASURED_NUMEL = 1 << 20  # a codec's speed here: one Gaussian tensor of this many entries (or the gradient's)


@dataclass(frozen=True)
class Model:
    """The user's model as predict builds it: its name and options, one sample's shape, its outputs, the batch."""
    name: str
    options: dict[str, Any]
    input_shape: tuple[int, ...]
    num_classes: int
    batch_size: int

    def build(self, device: str | torch.device = "cpu") -> torch.nn.Module:
        torch.manual_seed(0)
        with torch.device(device):
            return workloads.build_model(self.name, self.input_shape, self.num_classes, **self.options)


def gradient_shapes(model: Model) -> list[tuple[int, ...]]:
    """The shapes of the model's parameters, in ``parameters()`` order, from a build on the meta device."""
    return [tuple(p.shape) for p in model.build("meta").parameters()]


def batch_for(model: Model, net: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch the model takes: token ids where its first parametrised layer is an embedding, Gaussian
    inputs otherwise; class targets as many as its outputs have leading entries."""
    first = next((m for m in net.modules() if next(m.parameters(recurse=False), None) is not None), None)
    g = torch.Generator().manual_seed(0)
    shape = (model.batch_size, *model.input_shape)
    if isinstance(first, torch.nn.Embedding):
        x = torch.randint(0, first.num_embeddings, shape, generator=g)
    else:
        x = torch.randn(shape, generator=g)
    with torch.no_grad():
        out = net(x)
    y = torch.randint(0, out.shape[-1], out.shape[:-1], generator=g)
    return x, y


def profile_here(model: Model) -> Profile:
    """The model's step profile on this machine's CPU (``profile.profile_model``) on a random batch."""
    net = model.build()
    return profile_model(net, batch_for(model, net))


def default_settings(compressor: str) -> dict[str, Any]:
    """The settings of a configuration of ``compressor`` with its default parameters and algorithm (the casts
    all_reduce, the codecs sra unless a codec names its own: DGC's allgather), as the predictor's plans read
    them."""
    return {"compressor": compressor, "compressor_params": None, "algorithm": default_algorithm(compressor),
            "min_compress_numel": MIN_COMPRESS_NUMEL, "bucket_cap_mb": None, "intra": None, "inter": None}


def compressor_problem(name: str) -> str | None:
    """Why ``name`` cannot be predicted from a step time, or None."""
    if name not in compressors.NAMES:
        return f"unknown compressor {name!r}; valid: {', '.join(compressors.NAMES)}"
    if hook_only(name) or optimizer_method(name):
        return f"{name} runs as a hook or inside its optimizer, whose traffic the model does not know"
    return None


def table_rates(path: Path) -> dict[tuple[str, str], float]:
    """(compressor, op) -> GB/s of float32 input from a ``compressor_bench.py`` JSON: each compressor's default
    parameters, its Numba kernels where the table has them; ValueError, one line, where it is not such a file."""
    try:
        rows = json.loads(path.read_text())["rows"]
        found: dict[tuple[str, str], tuple[bool, float]] = {}
        for row in rows:
            if row["params"]:
                continue
            key, numba = (row["compressor"], row["op"]), row["impl"] == "numba"
            if key not in found or numba and not found[key][0]:
                found[key] = (numba, float(row["gbps"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"--codec_table {path} is not a JSON of benchmarks/compressor_bench.py ({error})") from None
    return {key: gbps for key, (_, gbps) in found.items()}


def measured_rates(names: Sequence[str], numel: int, repeats: int = 5) -> dict[tuple[str, str], float]:
    """(compressor, op) -> GB/s of float32 input measured here: encode and decode of one Gaussian tensor of
    ``numel`` entries into buffers made once, each the median of ``repeats`` after a warm-up."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    y = torch.empty_like(x)
    rates = {}
    for name in names:
        if name == "fp32":
            continue
        codec = compressors.get(name)
        payload = codec.encode(x)
        ops = {"encode": lambda: codec.encode(x, out=payload), "decode": lambda: codec.decode(payload, out=y)}
        for op, call in ops.items():
            times = []
            for _ in range(repeats + 1):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            rates[(name, op)] = 4 * numel / statistics.median(times[1:]) / 1e9
    return rates


def configuration(name: str, step_time_s: float, shapes: Sequence[tuple[int, ...]],
                  rates: dict[tuple[str, str], float], scale: float) -> Configuration:
    """``name``'s configuration with the one-worker times its trial would record, from codec speeds
    ``rates`` (GB/s of float32 input) times ``scale`` (the target's codec time over the rates')."""
    settings = default_settings(name)
    total = sum(math.prod(s) for s in shapes)
    compressible = sum(math.prod(s) for s in shapes if math.prod(s) >= MIN_COMPRESS_NUMEL)

    def seconds(op: str, numel: int) -> float:
        return 4 * numel / (rates[(name, op)] * 1e9) * scale

    encode = decode = exposed = 0.0
    if name in CAST_ITEMSIZE:
        # a cast's device work runs inside its all_reduce: the one-worker trial records it as exposed
        exposed = 0.0 if name == "fp32" else seconds("encode", total) + seconds("decode", total)
    else:  # sra on one worker: its chunk, then its server chunk, each encoded and decoded; allgather once
        times = 2 if settings["algorithm"] == "sra" else 1
        encode, decode = times * seconds("encode", compressible), times * seconds("decode", compressible)
    return Configuration(name, settings, step_time_s, encode, decode, exposed)


def predict_from_step(model: Model, step_time_s: float, names: Sequence[str], target: perfmodel.Cluster,
                      overlap: bool = True, overlap_slowdown: float | None = None, codec_table: Path | None = None,
                      prof: Profile | None = None, reduction_rate: float | None = None
                      ) -> tuple[pd.DataFrame, list[str]]:
    """Each of ``names`` (fp32 added where missing) on ``target``, the model's step on one of its devices
    ``step_time_s``. ``prof`` and ``reduction_rate`` (this machine's): measured here where not given.
    ``overlap_slowdown`` None: 0, and a note names the published figure for GPUs."""
    names = list(dict.fromkeys(["fp32", *names]))
    shapes = gradient_shapes(model)
    if prof is None:
        prof = profile_here(model)
    here_s = prof.fwd_s + prof.bwd_s + prof.opt_s
    scale = step_time_s / here_s  # the target's device time over this machine's, taken for the codecs too
    rate = (measure.reduction_rate() if reduction_rate is None else reduction_rate) / scale
    notes = [f"profile: {model.name} measured here ({here_s * 1e3:.4g} ms a step on a random batch of "
             f"{model.batch_size}), scaled to the step time {step_time_s * 1e3:.4g} ms; the reduction rate "
             f"measured here, scaled the same way"]
    if len(names) == 1:  # fp32 alone: no codec to time
        rates, codec_scale = {}, 1.0
    elif codec_table is not None:
        rates, codec_scale = table_rates(codec_table), 1.0
        missing = [n for n in names if n != "fp32" and not {(n, "encode"), (n, "decode")} <= rates.keys()]
        if missing:
            raise ValueError(f"--codec_table {codec_table} has no default-parameter row of {', '.join(missing)}")
        notes.append(f"codecs: encode and decode speeds from {codec_table}")
    else:
        numel = max(1, min(_MEASURED_NUMEL, sum(math.prod(s) for s in shapes)))
        rates, codec_scale = measured_rates(names, numel), scale
        notes.append(f"codecs: encode and decode measured here on {numel:,} floats, scaled as the step is (a "
                     "GPU's kernels may differ: give --codec_table with a table of the target's device)")
    if overlap_slowdown is None:
        overlap_slowdown = 0.0
        if overlap:
            notes.append(f"no slowdown of compute beside communication: on GPUs, --overlap_slowdown "
                         f"{perfmodel.GPU_OVERLAP_SLOWDOWN} is {perfmodel.GPU_SLOWDOWN_SOURCE}")
    configs = [configuration(n, step_time_s, shapes, rates, codec_scale) for n in names]
    fp32 = configs[0]
    half = next((c for c in configs if c.settings["compressor"] == "fp16"), None)
    step_at = stepper(configs, prof, step_time_s, rate, target, overlap, DeviceScale(), overlap_slowdown)
    fixed = {"num_workers": target.workers, "workers_per_host": target.workers_per_host,
             "bandwidth_bps": target.inter.bandwidth * 8, "intra_bandwidth_bps": target.intra.bandwidth * 8,
             "latency_s": target.inter.latency, "overlap": overlap, "overlap_slowdown": overlap_slowdown,
             "step_time_s": step_time_s}
    rows = [{"configuration": c.label, "compressor": c.settings["compressor"], "algorithm": c.settings["algorithm"],
             **fixed, **step_columns(c, fp32, half, step_at, fixed["bandwidth_bps"])} for c in configs]
    notes.append("per step only: steps to a target and accuracy need trials (`lowprec run`, then predict the "
                 "results folder)")
    return pd.DataFrame(rows, columns=COLUMNS), notes
