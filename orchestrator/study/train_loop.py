"""The training loop every worker runs: plain torch, with or without Ray.

``train(config, report)`` builds the workload (a built-in, torchvision's, or
the user's own model and data: workloads.catalog), wraps the model in DDP and
attaches the compressor as its communication hook (fp32 over allreduce, the
baseline, is plain DDP: no hook), trains, evaluates on the test set after
every epoch (and every ``eval_every_steps`` steps until the target is reached,
for the step of the first crossing), and calls ``report(metrics)``
with the epoch's columns (orchestrator.study.columns.EPOCH, each reduced over
steps and ranks as it is declared there). It runs three ways with the same code:

- in-process, one worker: ``python -m orchestrator.study.train_loop --compressor qsgd --compressor_params '{bits: 4}'``
- under torchrun: ``torchrun --nproc-per-node 2 -m orchestrator.study.train_loop --compressor qsgd``
- on a sweep's Ray workers (orchestrator.study.gang), where torch.distributed is already initialised.

With one worker the model is still wrapped in DDP (over a one-process group),
so every compressor, PowerSGD included, encodes and decodes every gradient
through the same hook as with many workers, and its cost in accuracy shows.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
import yaml
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

import workloads
from compressors.comm import accounting
from compressors import ddp, owns_momentum
from compressors.comm.stats import StepStats
from compressors.comm.topology import Topology, discover
from compressors.ddp.step_clock import StepClock

from . import columns, env_info, settings, stability
from .cuda_events import EventClock

Report = Callable[[dict[str, Any]], None]
EVAL_BATCH = 1000  # samples per forward pass when evaluating an in-memory classification split


class SettingError(ValueError):
    """A setting that the built workload shows to be invalid (a target metric the dataset's task has no
    value of), found before the first step: the command line's usage error, as the settings it checks."""


def _backend(config: dict[str, Any]) -> str:
    return config["backend"] if config["backend"] != "auto" else ("nccl" if config["use_gpu"] else "gloo")


def _setup_distributed(config: dict[str, Any], threads: int | None) -> tuple[int, int, torch.device, bool]:
    """Join the process group (torchrun's env, or Ray's already-made group), or make a one-process
    group so that one worker runs the same DDP hook as many; pick the device and, on CPUs, the torch
    threads (``threads``, else the cores over the workers on this machine).

    Returns rank, world, device and whether this call made the group (and must destroy it).
    """
    use_gpu = bool(config["use_gpu"])
    made = False
    if not dist.is_initialized():
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            dist.init_process_group(_backend(config))
        else:  # an in-memory store: nothing listens on a port
            dist.init_process_group(_backend(config), store=dist.HashStore(), rank=0, world_size=1)
            made = True
    rank, world = dist.get_rank(), dist.get_world_size()
    if use_gpu:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        # Workers sharing one machine's cores would otherwise oversubscribe them.
        torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // local))
    return rank, world, device, made


def _comm_hook(config: dict[str, Any], compressor: str, algorithm: str | None, params: dict[str, Any],
               topology: Topology, impl: str = "auto") -> Any:
    return ddp.comm_hook(compressor, algorithm, min_compress_numel=config["min_compress_numel"],
                         seed=config["seed"], impl=impl, overlap=config["overlap"], topology=topology,
                         intra=config["intra"] or "fp32", inter=config["inter"] or "sra",
                         momentum=_momentum(config) if owns_momentum(compressor) else None, **params)


def _momentum(config: dict[str, Any]) -> float:
    """The trial's SGD momentum (null: 0.9): the optimizer's, or the memory's of a method that keeps it (DGC)."""
    return 0.9 if config["momentum"] is None else config["momentum"]


def _plain_ddp(config: dict[str, Any]) -> bool:
    """fp32 over allreduce is what users run: DDP with no hook, its bucketed all_reduce overlapped."""
    return config["compressor"] == "fp32" and config["algorithm"] in (None, "allreduce")


class _PlainDDP:
    """The statistics of plain DDP, which has no hook to count them: the bytes of its ring all_reduces of
    every gradient in fp32 (``accounting``); its collectives' own time is not observable (NaN: the
    tables leave it empty)."""

    def __init__(self, grad_numel: int, world: int) -> None:
        self.bytes_sent = accounting.ring_allreduce_bytes(4 * grad_numel, world)
        self.numel = grad_numel
        self.history: list[StepStats] = []

    def end_step(self) -> None:
        self.history.append(StepStats(bytes_sent=self.bytes_sent, comm_s=math.nan, numel=self.numel))


def _optimizer(config: dict[str, Any], params) -> torch.optim.Optimizer:
    name, lr, wd = config["optimizer"], config["lr"], config["weight_decay"]
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    # A method that keeps the momentum in its memory (DGC's momentum correction) gets SGD without.
    momentum = 0.0 if owns_momentum(config["compressor"]) else _momentum(config)
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=wd)


class _Aggregate:
    """Values reduced over the ranks, entry by entry (op: max, min or sum): one all_reduce per call."""

    _OPS = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "sum": dist.ReduceOp.SUM}

    def __init__(self, world: int, device: torch.device) -> None:
        self.world, self.device = world, device

    def __call__(self, values: list[float], op: str) -> list[float]:
        if self.world == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=self._OPS[op])
        return t.tolist()


def task_loss(out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of logits [..., classes] against targets [...]: a label per sample (classification) or
    the next token at every position (a language model), in nats per target."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction=reduction)


def _batches(train: workloads.Split | Dataset, rank: int, world: int, epoch: int, config: dict[str, Any],
             steps: int, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's ``steps`` batches of an epoch. Both ways give the same samples: shard_indices is
    DistributedSampler's order (a permutation seeded by seed + epoch, padded, every world-th)."""
    size = config["batch_size"]
    if isinstance(train, workloads.Split):  # in memory: indexing beats a DataLoader's per-sample calls
        indices = workloads.shard_indices(len(train), rank, world, epoch, config["seed"])
        for step in range(steps):
            batch = indices[step * size:(step + 1) * size]
            yield train.x[batch], train.y[batch]
        return
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=config["seed"])
    sampler.set_epoch(epoch)
    loader = DataLoader(train, batch_size=size, sampler=sampler, num_workers=config["loader_workers"],
                        pin_memory=device.type == "cuda")
    yield from itertools.islice(loader, steps)


def _evaluate(model: torch.nn.Module, data: workloads.DatasetPair, rank: int, world: int, device: torch.device,
              aggregate: _Aggregate, config: dict[str, Any]) -> dict[str, float | None]:
    """test_accuracy, test_loss and test_perplexity (a language model's; None otherwise) on the test set's
    first eval_samples (all of it by default), each rank taking every world-th sample."""
    test = data.test
    count = len(test) if config["eval_samples"] is None else min(config["eval_samples"], len(test))
    if isinstance(test, workloads.Split):
        per_pass = EVAL_BATCH if data.task == workloads.CLASSIFICATION else config["batch_size"]
        x_all, y_all = test.x[rank:count:world], test.y[rank:count:world]
        batches = ((x_all[i:i + per_pass], y_all[i:i + per_pass]) for i in range(0, len(y_all), per_pass))
    else:
        batches = DataLoader(Subset(test, range(rank, count, world)), batch_size=config["batch_size"],
                             num_workers=config["loader_workers"], pin_memory=device.type == "cuda")
    model.eval()
    correct, loss_sum, targets = 0.0, 0.0, 0.0
    with torch.no_grad():
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss_sum += float(task_loss(out, y, "sum"))
            correct += float((out.argmax(-1) == y).sum())
            targets += y.numel()
    model.train()
    correct, loss_sum, targets = aggregate([correct, loss_sum, targets], "sum")
    loss = loss_sum / targets
    perplexity = float(torch.tensor(loss, dtype=torch.float64).exp()) if data.task == workloads.LANGUAGE_MODEL \
        else None
    return {"test_accuracy": correct / targets, "test_loss": loss, "test_perplexity": perplexity}


def _constant_accuracy(data: workloads.DatasetPair, config: dict[str, Any]) -> float | None:
    """The test accuracy of always predicting the most frequent class: what chance means here; None where
    the test set does not say without reading every sample, and for a language model, whose next-token
    accuracy says little of its learning (its loss does)."""
    test = data.test
    if data.task == workloads.LANGUAGE_MODEL:
        return None
    if isinstance(test, workloads.Split):
        y = test.y[:config["eval_samples"]].reshape(-1)
        return float(torch.bincount(y).max()) / y.numel()
    if hasattr(test, "targets"):  # torchvision's ImageFolder
        y = torch.as_tensor(test.targets)[:config["eval_samples"]]
        return float(torch.bincount(y).max()) / y.numel()
    return None


def train(config: dict[str, Any], report: Report | None = None, threads: int | None = None,
          started: Callable[[], None] | None = None) -> dict[str, Any]:
    """Train one configuration; returns ``{status, reason, model_summary, sources, final, history,
    cuda_events, step_times_s}`` (``sources``: the file and sha256 of each module of the user's code it ran;
    ``step_times_s``: every step's time, the slowest rank's).

    ``config`` holds training-loop settings (``settings.TRAINING_KEYS``; missing
    ones take their defaults); an invalid one raises ValueError naming it.
    ``threads``: torch threads on CPUs where the launcher knows better than the
    local world size (emulated hosts share one machine's cores). ``started()`` is called once, when the
    first training step is done (the launcher's start-up limit ends there).
    """
    config = settings.check_training(config)
    rank, world, device, made_group = _setup_distributed(config, threads)
    try:
        return _train(config, report, rank, world, device, started)
    finally:
        if made_group:
            dist.destroy_process_group()


def _train(config: dict[str, Any], report: Report | None, rank: int, world: int,
           device: torch.device, started: Callable[[], None] | None) -> dict[str, Any]:
    aggregate = _Aggregate(world, device)
    data = workloads.build_dataset(config["dataset"], data_dir=config["data_dir"], seed=config["seed"],
                                   **settings.dataset_options_of(config))
    for name, split in (("training", data.train), ("test", data.test)):
        if len(split) == 0:  # no step, or no evaluation, would follow
            raise ValueError(f"dataset {config['dataset']}: the {name} split has no samples")
    target = settings.target_of(config)
    # A factory's task is known now (a built-in's was checked with the settings).
    problem = target and settings.target_task_problem(target[0], config["dataset"], data.task)
    if problem:
        raise SettingError(f"setting target: {problem}")
    torch.manual_seed(config["seed"])  # identical initial weights on every rank
    model = workloads.build_model(config["model"], data.input_shape, data.num_classes,
                                  **settings.model_options_of(config)).to(device)
    summary = workloads.model_summary(model, config["min_compress_numel"])
    # Which host each rank runs on: what crosses hosts (bytes_inter), and the hierarchical algorithm's levels.
    topology = discover()
    sources = workloads.sources(config["model"], config["dataset"], config["imports"] or ())

    # DDP also with one worker: the compressor encodes and decodes every gradient, so its cost in
    # accuracy shows, through the same hook as with many.
    model = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=config["bucket_cap_mb"])
    params = list(model.module.parameters())
    grad_numel = sum(p.numel() for p in params)
    clock = StepClock(model.module)
    events = EventClock(device)
    if _plain_ddp(config):
        plain = _PlainDDP(grad_numel, world)
        warm = main = plain
    else:
        plain = None
        main = _comm_hook(config, config["compressor"], config["algorithm"], config["compressor_params"], topology,
                          config["impl"])
        warm = _comm_hook(config, "fp32", None, {}, topology)
        switch = ddp.HookSwitch(warm if config["warmup_epochs"] > 0 else main, clock)
        switch.register(model, [warm, main])
    optimizer = _optimizer(config, params)
    samples_per_epoch = math.ceil(len(data.train) / world)

    history: list[dict[str, Any]] = []
    world_steps: list[float] = []
    status, reason, train_time, reached_at, reached_step = "ok", None, 0.0, None, None
    global_step = 0
    for epoch_number in range(1, config["epochs"] + 1):
        if config["fail_at_epoch"] == epoch_number:
            raise RuntimeError(f"fail_at_epoch={epoch_number}: failing on purpose")
        hook = warm if epoch_number <= config["warmup_epochs"] else main
        if plain is None:
            switch.active = hook
        steps = math.ceil(samples_per_epoch / config["batch_size"])
        if config["max_steps_per_epoch"]:
            steps = min(steps, config["max_steps_per_epoch"])
        every = config["eval_every_steps"] or math.ceil(steps / 10)
        step_times, exposed, loss_sum, samples, targets = [], [], 0.0, 0, 0
        first_stat = len(hook.history)
        ticks = env_info.cpu_ticks()
        for step, (x, y) in enumerate(_batches(data.train, rank, world, epoch_number, config, steps, device)):
            x, y = x.to(device), y.to(device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            clock.start()
            events.mark(start)
            loss = task_loss(model(x), y)
            if config["force_nan_at_step"] == global_step:
                loss = loss * math.nan
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            backward_end = time.perf_counter()
            exposed.append(clock.exposed_s(backward_end))
            events.mark(backward_end)
            optimizer.step()
            events.mark(time.perf_counter())
            if device.type == "cuda":
                torch.cuda.synchronize()
            step_times.append(time.perf_counter() - start)
            events.end_step(step_times[-1])
            if plain is not None:
                plain.end_step()
            loss_sum += float(loss.detach()) * y.numel()
            samples += len(x)
            targets += y.numel()
            global_step += 1
            if global_step == 1 and started is not None:
                started()
            if target is not None and reached_at is None and global_step % every == 0 and step + 1 < steps:
                (elapsed,) = aggregate([math.fsum(step_times)], "max")  # the slowest rank's, as train_time_s
                tested = _evaluate(model, data, rank, world, device, aggregate, config)
                if columns.reached(target[0], tested[target[0]], target[1]):
                    reached_at, reached_step = train_time + elapsed, global_step
        stats = hook.history[first_stat:]
        # A Reducer counts what crossed hosts; PyTorch's hooks and plain DDP run ring all_reduces, whose
        # bytes go to the next rank.
        counted = isinstance(hook, ddp.ReducerHookState)
        inter = [s.bytes_inter if counted else s.bytes_sent * topology.inter_share_ring(rank) for s in stats]
        end_ticks = env_info.cpu_ticks()
        # Per step: its time, compute = time - exposed communication, and the hook's own phases.
        per_step = {
            "train_time_s": step_times, "step_time_s": step_times,
            "compute_s": [t - x for t, x in zip(step_times, exposed)], "exposed_comm_s": exposed,
            "encode_s": [s.encode_s for s in stats], "comm_s": [s.comm_s for s in stats],
            "decode_s": [s.decode_s for s in stats], "bytes_sent": [s.bytes_sent for s in stats],
            "bytes_intra": [s.bytes_sent - x for s, x in zip(stats, inter)], "bytes_inter": inter,
        }
        local = columns.over_steps(per_step)
        local["cpu_steal_share"] = env_info.steal_share(ticks, end_ticks)
        local["cpu_idle_share"] = env_info.idle_share(ticks, end_ticks)
        local["load_avg"] = env_info.load_average()
        local["cores"], local["threads"] = float(os.cpu_count() or math.nan), float(torch.get_num_threads())
        # The world's steps: each the slowest rank's (a step ends when every rank's does).
        world_steps += aggregate(step_times, "max")  # the ranks run as many steps
        epoch = {**columns.reduce_over_ranks(local, aggregate), "epoch": epoch_number}
        epoch_time = epoch["train_time_s"]
        train_time += epoch_time
        loss_sum, samples, targets = aggregate([loss_sum, float(samples), float(targets)], "sum")
        train_loss = loss_sum / max(targets, 1)
        tested = _evaluate(model, data, rank, world, device, aggregate, config)
        test_loss = tested["test_loss"]
        if reached_at is None and target is not None and columns.reached(target[0], tested[target[0]], target[1]):
            reached_at, reached_step = train_time, global_step
        # The last step's update may overflow after its (finite) loss was taken: check what it left.
        finite_params = bool(torch.stack([torch.isfinite(p).all() for p in params]).all())
        (finite_params,) = aggregate([float(finite_params)], "min")
        if not math.isfinite(train_loss) or not math.isfinite(test_loss):
            which, value = ("train", train_loss) if not math.isfinite(train_loss) else ("test", test_loss)
            status, reason = "diverged", f"{which} loss became {value} in epoch {epoch_number}"
        elif not finite_params:
            status, reason = "diverged", f"a parameter became non-finite in epoch {epoch_number}"
        epoch.update({
            "train_time_s": train_time, **tested, "train_loss": train_loss,
            "samples_per_s": samples / max(epoch_time, 1e-12),
            "compression_ratio": accounting.compression_ratio(grad_numel, world, epoch["bytes_sent"]),
            "time_to_target_s": reached_at, "steps_to_target": reached_step,
            "status": "running" if status == "ok" and epoch_number < config["epochs"] else status,
        })
        metrics = {c.name: epoch[c.name] for c in columns.EPOCH}
        history.append(metrics)
        if status == "ok" and epoch_number == config["epochs"]:
            reason = stability.unstable_reason(history, _constant_accuracy(data, config))
            if reason is not None:
                status = metrics["status"] = "unstable"
        if report is not None:
            report(metrics)
        if status == "diverged":
            break
    return {"status": status, "reason": reason, "model_summary": summary, "sources": sources,
            "final": history[-1] if history else {}, "history": history, "cuda_events": events.summary(),
            "step_times_s": world_steps}


def _flag_type(key: str) -> Callable[[str], Any]:
    """Read a flag's text as YAML reads a value, then check it against the setting's declaration."""
    param = settings.param(key)

    def parse(text: str) -> Any:
        try:
            value = param.read(yaml.safe_load(text))
        except yaml.YAMLError:
            value = text
        problem = param.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
        return param.check(key, value)

    parse.__name__ = param.kind if isinstance(param.kind, str) else param.kind.__name__  # argparse's messages
    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator.study.train_loop", allow_abbrev=False,
        description="Train one configuration without Ray; under torchrun, one process per worker "
                    "(the number of workers is torchrun's --nproc-per-node).")
    for key in settings.TRAINING_KEYS:
        param = settings.param(key)
        parser.add_argument(f"--{key}", type=_flag_type(key), default=None, metavar=key.upper(),
                            help=f"{param.doc}; valid: {param.describe()}; default: {param.default}")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the result here")
    return parser


def _parse_args(argv: list[str] | None) -> dict[str, Any]:
    parser = _parser()
    args = vars(parser.parse_args(argv))
    out = args.pop("json")
    config = {k: v for k, v in args.items() if v is not None}
    if config.get("compressor_params"):  # YAML text too, read as a sweep file's compressor entry is
        compressor = config.get("compressor", settings.param("compressor").default)
        config["compressor_params"] = settings.read_compressor_params(compressor, config["compressor_params"])
    try:
        settings.check_training(config)
    except ValueError as error:
        parser.error(str(error))
    if out is not None:  # found now, not after the training
        folder = os.path.dirname(out) or "."
        if os.path.isdir(out) or not os.path.basename(out):
            parser.error(f"argument --json: cannot write {out!r}: not a file name")
        if not os.path.isdir(folder):
            parser.error(f"argument --json: cannot write {out!r}: no folder {folder!r}")
        if not os.access(out if os.path.exists(out) else folder, os.W_OK):
            parser.error(f"argument --json: cannot write {out!r}: permission denied")
    return {"config": config, "json": out}


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    def show(m: dict[str, Any]) -> None:
        if not dist.is_initialized() or dist.get_rank() == 0:
            print(f"epoch {m['epoch']}: test_accuracy {m['test_accuracy']:.4f}  test_loss {m['test_loss']:.4f}  "
                  f"train_loss {m['train_loss']:.4f}  "
                  f"train_time_s {m['train_time_s']:.2f}  step_time_s {m['step_time_s']:.4f}  "
                  f"bytes_sent {m['bytes_sent']:.0f}"
                  + (f"  steps_to_target {m['steps_to_target']}" if m["steps_to_target"] is not None else ""),
                  flush=True)
    try:
        result = train(args["config"], report=show)
    except SettingError as error:  # found once the data is built: a usage error, as check_training's
        _parser().error(str(error))
    if not dist.is_initialized() or dist.get_rank() == 0:
        s = result["model_summary"]
        print(f"model: {s['parameters']:,} parameters, {s['grad_bytes_fp32']:,} gradient bytes in fp32, "
              f"{s['compressible_share']:.1%} of them in tensors of >= min_compress_numel elements")
        events = result["cuda_events"]
        if events is not None:
            print(f"on the GPU's clock (CUDA events, medians of {events['steps']} steps): backward done "
                  f"{events['backward_gpu_lag_s'] * 1e3:+.2f} ms after backward() returned; optimizer done at "
                  f"{events['optimizer_gpu_s'] * 1e3:.2f} ms, the step's CPU time {events['step_time_s'] * 1e3:.2f} ms")
        print(f"status: {result['status']}" + (f" ({result['reason']})" if result["reason"] else ""))
        if args["json"]:
            with open(args["json"], "w") as f:
                json.dump(result, f, indent=1)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
