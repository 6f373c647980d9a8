"""The training loop every worker runs: plain torch, with or without Ray.

``train(config, report)`` builds the workload, wraps the model in DDP when
the world is larger than one and attaches the compressor as its
communication hook, trains, evaluates on the whole test set after every
epoch, and calls ``report(metrics)`` with rank-aggregated metrics (times:
max over ranks; bytes: mean).  It runs three ways with the same code:

- in-process, one worker: ``python -m orchestrator.train_loop --compressor qsgd --bits 4``
- under torchrun: ``torchrun --nproc-per-node 2 -m orchestrator.train_loop --compressor qsgd``
- inside Ray Train, where torch.distributed is already initialised.

With one worker there is no communication, but the compressor still
encodes and decodes every gradient, so its cost in accuracy shows.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

import compressors
import workloads
from compressors import accounting
from compressors.hook import HookSwitch

from .config import AXIS_OPTIONS, CLUSTER_OPTIONS, WORKLOAD_OPTIONS, compressor_params

Report = Callable[[dict[str, Any]], None]
_DATASET_OPTIONS = ("input_shape", "num_classes", "num_samples")
_MODEL_OPTIONS = ("width", "depth")
EVAL_BATCH = 1000


def defaults() -> dict[str, Any]:
    """Every training-loop setting with its default (the sweep file's defaults)."""
    out = {"compressor": "none", **{p: None for p in compressor_params()}}
    for options in (AXIS_OPTIONS, CLUSTER_OPTIONS, WORKLOAD_OPTIONS):
        out.update({key: option.default for key, option in options.items()})
    return out


def _setup_distributed(config: dict[str, Any]) -> tuple[int, int, torch.device]:
    """Join the process group (torchrun's env, or Ray's already-made group); pick the device."""
    use_gpu = bool(config["use_gpu"])
    if not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        backend = config["backend"] if config["backend"] != "auto" else ("nccl" if use_gpu else "gloo")
        dist.init_process_group(backend)
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    if use_gpu:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        # Workers sharing one machine's cores would otherwise oversubscribe them.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
    return rank, world, device


def _reducer(config: dict[str, Any], compressor: str, group_algorithm: str | None) -> compressors.Reducer:
    known = compressors.check_params(compressor)
    params = {k: config[k] for k in known if k != "seed" and config.get(k) is not None}
    return compressors.Reducer(compressor, group_algorithm, min_compress_numel=config["min_compress_numel"],
                               seed=config["seed"], **params)


def _optimizer(config: dict[str, Any], params) -> torch.optim.Optimizer:
    name, lr, wd = config["optimizer"], config["lr"], config["weight_decay"]
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    momentum = config["momentum"] if name == "momentum" else 0.0
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd)


class _Aggregate:
    """Rank-aggregated scalars: one all_reduce per kind."""

    def __init__(self, world: int, device: torch.device) -> None:
        self.world, self.device = world, device

    def __call__(self, values: list[float], op: str) -> list[float]:
        if self.world == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        out = t.tolist()
        return [v / self.world for v in out] if op == "mean" else out


def _evaluate(model: torch.nn.Module, test: workloads.Split, rank: int, world: int, device: torch.device,
              aggregate: _Aggregate) -> tuple[float, float]:
    """Accuracy and mean loss on the whole test set, each rank taking every world-th sample."""
    model.eval()
    correct, loss_sum = 0.0, 0.0
    x_all, y_all = test.x[rank::world], test.y[rank::world]
    with torch.no_grad():
        for i in range(0, len(y_all), EVAL_BATCH):
            x, y = x_all[i:i + EVAL_BATCH].to(device), y_all[i:i + EVAL_BATCH].to(device)
            out = model(x)
            loss_sum += float(F.cross_entropy(out, y, reduction="sum"))
            correct += float((out.argmax(1) == y).sum())
    model.train()
    correct, loss_sum = aggregate([correct, loss_sum], "sum")
    return correct / len(test.y), loss_sum / len(test.y)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def train(config: dict[str, Any], report: Report | None = None) -> dict[str, Any]:
    """Train one configuration; returns ``{status, reason, model_summary, final, history}``."""
    config = {**defaults(), **{k: v for k, v in config.items() if v is not None}}
    unknown = sorted(set(config) - set(defaults()) - {"name", "trial_id"})
    if unknown:
        raise ValueError(f"unknown training settings {unknown}; valid: {sorted(defaults())}")
    rank, world, device = _setup_distributed(config)
    aggregate = _Aggregate(world, device)

    options = {k: config[k] for k in _DATASET_OPTIONS if config[k] is not None}
    data = workloads.build_dataset(config["dataset"], data_dir=config["data_dir"], seed=config["seed"], **options)
    torch.manual_seed(config["seed"])  # identical initial weights on every rank
    model_options = {k: config[k] for k in _MODEL_OPTIONS if config[k] is not None}
    model = workloads.build_model(config["model"], data.input_shape, data.num_classes, **model_options).to(device)
    summary = workloads.model_summary(model, config["min_compress_numel"])

    main = _reducer(config, config["compressor"], config["algorithm"])
    warm = _reducer(config, "none", None)
    switch = HookSwitch(warm if config["warmup_epochs"] > 0 else main)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        switch.register(model, [warm, main])
        params = list(model.module.parameters())
    else:
        params = list(model.parameters())
    optimizer = _optimizer(config, params)
    grad_numel = sum(p.numel() for p in params)
    samples_per_epoch = math.ceil(len(data.train.y) / world)

    history: list[dict[str, Any]] = []
    status, reason, train_time, reached_at = "ok", None, 0.0, None
    global_step = 0
    for epoch in range(1, config["epochs"] + 1):
        if config["fail_at_epoch"] == epoch:
            raise RuntimeError(f"fail_at_epoch={epoch}: failing on purpose")
        switch.active = warm if epoch <= config["warmup_epochs"] else main
        reducer = switch.active
        indices = workloads.shard_indices(len(data.train.y), rank, world, epoch, config["seed"])
        steps = math.ceil(samples_per_epoch / config["batch_size"])
        if config["max_steps_per_epoch"]:
            steps = min(steps, config["max_steps_per_epoch"])
        step_times, loss_sum, samples = [], 0.0, 0
        first_stat = len(reducer.history)
        for step in range(steps):
            batch = indices[step * config["batch_size"]:(step + 1) * config["batch_size"]]
            x, y = data.train.x[batch].to(device), data.train.y[batch].to(device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            if config["force_nan_at_step"] == global_step:
                loss = loss * math.nan
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            if world == 1 and reducer.compressor not in ("none", "powersgd"):
                keys = [i for i, p in enumerate(params) if p.grad is not None]
                reducer.average([params[i].grad for i in keys], keys)
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            step_times.append(time.perf_counter() - start)
            loss_sum += float(loss.detach()) * len(batch)
            samples += len(batch)
            global_step += 1
        stats = reducer.history[first_stat:]
        (epoch_time,) = aggregate([sum(step_times)], "max")
        train_time += epoch_time
        loss_sum, samples = aggregate([loss_sum, float(samples)], "sum")
        bytes_per_step = statistics.fmean(s.bytes_sent for s in stats) if stats else 0.0
        per_step = [(t, s.encode_s, s.comm_s, s.decode_s) for t, s in zip(step_times, stats)] or \
                   [(t, 0.0, 0.0, 0.0) for t in step_times]
        medians = [_median([row[i] for row in per_step]) for i in range(4)]
        compute = _median([t - e - c - d for t, e, c, d in per_step])
        step_time, encode_s, comm_s, decode_s, compute_s = aggregate(medians + [compute], "max")
        (bytes_per_step,) = aggregate([bytes_per_step], "mean")
        train_loss = loss_sum / max(samples, 1)
        accuracy, test_loss = _evaluate(model, data.test, rank, world, device, aggregate)
        if reached_at is None and config["target_accuracy"] is not None and accuracy >= config["target_accuracy"]:
            reached_at = train_time
        if not math.isfinite(train_loss):
            status, reason = "diverged", f"train loss became {train_loss} in epoch {epoch}"
        metrics = {
            "epoch": epoch, "train_time_s": train_time, "test_accuracy": accuracy, "test_loss": test_loss,
            "train_loss": train_loss, "step_time_s": step_time,
            "samples_per_s": samples / max(epoch_time, 1e-12),
            "compute_s": compute_s, "encode_s": encode_s, "comm_s": comm_s, "decode_s": decode_s,
            "bytes_per_step": bytes_per_step,
            "compression_ratio": accounting.compression_ratio(grad_numel, world, bytes_per_step),
            "time_to_accuracy_s": reached_at,
            "status": "running" if status == "ok" and epoch < config["epochs"] else status,
        }
        history.append(metrics)
        if report is not None:
            report(metrics)
        if status == "diverged":
            break
    return {"status": status, "reason": reason, "model_summary": summary,
            "final": history[-1] if history else {}, "history": history}


def _parse_args(argv: list[str] | None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.train_loop",
                                     description="Train one configuration without Ray (torchrun for several workers).")
    for key, default in defaults().items():
        parser.add_argument(f"--{key}", default=None, metavar=type(default).__name__.upper() if default is not None else "VALUE",
                            help=f"default: {default}")
    parser.add_argument("--json", default=None, help="write the result here")
    args = vars(parser.parse_args(argv))
    out = args.pop("json")
    config = {k: _parse_value(v) for k, v in args.items() if v is not None}
    return {"config": config, "json": out}


def _parse_value(text: str) -> Any:
    """Numbers, booleans, null and lists as YAML reads them; anything else as text."""
    import yaml
    return yaml.safe_load(text)


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    def show(m: dict[str, Any]) -> None:
        if not dist.is_initialized() or dist.get_rank() == 0:
            print(f"epoch {m['epoch']}: test_accuracy {m['test_accuracy']:.4f}  train_loss {m['train_loss']:.4f}  "
                  f"train_time_s {m['train_time_s']:.2f}  step_time_s {m['step_time_s']*1e3:.1f} ms  "
                  f"bytes_per_step {m['bytes_per_step']:.0f}", flush=True)
    result = train(args["config"], report=show)
    if not dist.is_initialized() or dist.get_rank() == 0:
        s = result["model_summary"]
        print(f"model: {s['parameters']:,} parameters, {s['grad_bytes_fp32']:,} gradient bytes in fp32, "
              f"{s['compressible_share']:.1%} of them in tensors of >= min_compress_numel elements")
        print(f"status: {result['status']}" + (f" ({result['reason']})" if result["reason"] else ""))
        if args["json"]:
            with open(args["json"], "w") as f:
                json.dump(result, f, indent=1)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
