"""The training loop every worker runs: plain torch, with or without Ray.

``train(config, report)`` builds the workload (a built-in, torchvision's, or
the user's own model and data: workloads.catalog), wraps the model in DDP and
attaches the compressor as its communication hook (orchestrator.study.ddp_setup;
fp32 over allreduce, the baseline, is plain DDP: no hook), trains, timing each
step (orchestrator.study.step_timer), evaluates on the test set after every
epoch (orchestrator.study.evaluation; and every ``eval_every_steps`` steps until
the target is reached, for the step of the first crossing), and calls
``report(metrics)`` with the epoch's columns (orchestrator.study.columns.EPOCH,
each reduced over steps and ranks as it is declared there). It runs three ways
with the same code:

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import yaml
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import workloads
from compressors.comm import accounting

from . import columns, ddp_setup, env_info, evaluation, settings, stability
from .evaluation import task_loss

Report = Callable[[dict[str, Any]], None]


class SettingError(ValueError):
    """A setting that the built workload shows to be invalid (a target metric the dataset's task has no
    value of), found before the first step: the command line's usage error, as the settings it checks."""


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


def train(config: dict[str, Any], report: Report | None = None, threads: int | None = None,
          started: Callable[[], None] | None = None) -> dict[str, Any]:
    """Train one configuration; returns ``{status, reason, model_summary, sources, final, history,
    cuda_events, step_times_s}`` (``sources``: the file and sha256 of each module of the user's code it ran;
    ``step_times_s``: every step's time, the slowest rank's; a periodic sync's: every finished run of
    inner_steps steps' mean step).

    ``config`` holds training-loop settings (``settings.TRAINING_KEYS``; missing
    ones take their defaults); an invalid one raises ValueError naming it.
    ``threads``: torch threads on CPUs where the launcher knows better than the
    local world size (emulated hosts share one machine's cores). ``started()`` is called once, when the
    first training step is done (the launcher's start-up limit ends there).
    """
    config = settings.check_training(config)
    rank, world, device, made_group = ddp_setup.setup_distributed(config, threads)
    try:
        return _train(config, report, rank, world, device, started)
    finally:
        if made_group:
            dist.destroy_process_group()


def _dataset(config: dict[str, Any]) -> workloads.DatasetPair:
    """The run's dataset; ValueError where a split has no samples."""
    data = workloads.build_dataset(config["dataset"], data_dir=config["data_dir"], seed=config["seed"],
                                   **settings.dataset_options_of(config))
    for name, split in (("training", data.train), ("test", data.test)):
        if len(split) == 0:  # no step, or no evaluation, would follow
            raise ValueError(f"dataset {config['dataset']}: the {name} split has no samples")
    return data


def _target(config: dict[str, Any], data: workloads.DatasetPair) -> tuple[str, float] | None:
    """The target (metric, value), checked against the dataset's task."""
    target = settings.target_of(config)
    # A factory's task is known now (a built-in's was checked with the settings).
    problem = target and settings.target_task_problem(target[0], config["dataset"], data.task)
    if problem:
        raise SettingError(f"setting target: {problem}")
    return target


def _steps_per_epoch(config: dict[str, Any], samples: int, world: int) -> int:
    """Each rank's steps an epoch: its share of the ``samples`` in batches, at most max_steps_per_epoch."""
    steps = math.ceil(math.ceil(samples / world) / config["batch_size"])
    return min(steps, config["max_steps_per_epoch"]) if config["max_steps_per_epoch"] else steps


@dataclass
class _Run:
    """What the loop carries from step to step and epoch to epoch."""

    config: dict[str, Any]
    data: workloads.DatasetPair
    rank: int
    world: int
    device: torch.device
    setup: ddp_setup.Setup
    aggregate: _Aggregate
    target: tuple[str, float] | None
    started: Callable[[], None] | None
    train_time: float = 0.0  # of the epochs so far, the slowest rank's
    global_step: int = 0
    reached_at: float | None = None  # time_to_target_s
    reached_step: int | None = None  # steps_to_target
    # Every step's time, the slowest rank's (a periodic sync's: every finished run's mean step, Run.windows).
    world_steps: list[float] = field(default_factory=list)
    # A periodic sync's run of inner_steps steps that the last epoch left unfinished: per series, its steps.
    unfinished: dict[str, list[float]] = field(default_factory=dict)

    def evaluate(self) -> dict[str, float | None]:
        """The test set's metrics now (with a periodic sync, of the global parameters)."""
        with self.setup.sync.evaluated(), self.setup.autocast():
            return evaluation.evaluate(self.setup.model, self.data, self.rank, self.world, self.device,
                                       self.aggregate, self.config)

    def windows(self, name: str, values: list[float]) -> list[float]:
        """The epoch's per-step ``values`` of series ``name`` as the mean of each finished run of
        ``sync.period`` steps, counted from the first step of training (a run the epoch leaves unfinished
        goes on in the next; the last one of training is left out), so that each holds its share of the
        exchanges a periodic sync makes once a run. Every step its own with a period of 1."""
        period = self.setup.sync.period
        if period == 1:
            return list(values)
        series = self.unfinished.get(name, []) + list(values)
        done = len(series) // period * period
        self.unfinished[name] = series[done:]
        return [math.fsum(series[i:i + period]) / period for i in range(0, done, period)]

    def note_target(self, tested: dict[str, float | None], at: float) -> None:
        """Keep ``at`` (training seconds) and the step as the target's, where ``tested`` is its first crossing."""
        if self.reached_at is None and self.target is not None and \
                columns.reached(self.target[0], tested[self.target[0]], self.target[1]):
            self.reached_at, self.reached_step = at, self.global_step


@dataclass
class _Seen:
    """What an epoch's steps trained on, on this rank: the loss summed over targets, samples, targets."""

    loss_sum: float = 0.0
    samples: int = 0
    targets: int = 0


def _step(run: _Run, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One training step on a batch on the device; returns its loss."""
    setup = run.setup
    setup.timer.start()
    with setup.autocast():
        loss = task_loss(setup.model(x), y)
    if run.config["force_nan_at_step"] == run.global_step:
        loss = loss * math.nan
    setup.optimizer.zero_grad(set_to_none=False)
    (loss if setup.scaler is None else setup.scaler.scale(loss)).backward()
    setup.timer.backward_done()
    if setup.scaler is None:
        setup.optimizer.step()
    else:  # unscales the averaged gradients; skips the step where they overflowed, and lowers the scale
        setup.scaler.step(setup.optimizer)
        setup.scaler.update()
    setup.timer.step_done(setup.sync.after_step())
    setup.sync.end_step()
    return loss


def _train_epoch(run: _Run, epoch: int, steps: int) -> _Seen:
    """This rank's ``steps`` steps of ``epoch``; until the target is reached, an evaluation every
    ``eval_every_steps`` (default: ten an epoch) finds the step of its first crossing."""
    every = run.config["eval_every_steps"] or math.ceil(steps / 10)
    seen = _Seen()
    run.setup.timer.new_epoch()
    for step, (x, y) in enumerate(_batches(run.data.train, run.rank, run.world, epoch, run.config, steps,
                                           run.device)):
        x, y = x.to(run.device), y.to(run.device)
        loss = _step(run, x, y)
        seen.loss_sum += float(loss.detach()) * y.numel()
        seen.samples += len(x)
        seen.targets += y.numel()
        run.global_step += 1
        if run.global_step == 1 and run.started is not None:
            run.started()
        if run.target is not None and run.reached_at is None and run.global_step % every == 0 and step + 1 < steps:
            # the slowest rank's time so far, as train_time_s
            (elapsed,) = run.aggregate([math.fsum(run.setup.timer.step_times)], "max")
            run.note_target(run.evaluate(), run.train_time + elapsed)
    return seen


def _others_cores(run: _Run, start: env_info.CpuTicks | None, end: env_info.CpuTicks | None) -> float:
    """The cores other processes than the trial's workers used during the epoch (env_info.others_cores),
    where every rank runs on this machine (a local run, an emulated cluster); NaN on several machines, and
    with loader workers (child processes, whose CPU time a process's own does not count)."""
    known = start is not None and end is not None and not run.config.get("loader_workers")
    ours = end.own_s - start.own_s if known else math.nan
    where, (ours_s,) = env_info.machine_id(), run.aggregate([ours], "sum")
    lowest, negated_highest = run.aggregate([where, -where], "min")  # one collective for both ends
    return env_info.others_cores(start, end, ours_s) if lowest == -negated_highest == where else math.nan


def _epoch_metrics(run: _Run, epoch_number: int, hook: Any, first_stat: int, ticks: env_info.CpuTicks | None,
                   seen: _Seen) -> dict[str, Any]:
    """The epoch's columns (columns.EPOCH, each reduced over steps and ranks as declared there) but its status:
    from the timer's steps, the hook's statistics from ``first_stat`` on, the CPU's ``ticks`` at the epoch's
    start and what it trained on, then the test set's metrics. Adds the epoch to the run's training time and
    steps, and notes the target where the test set's metrics cross it."""
    timer, stats = run.setup.timer, hook.history[first_stat:]
    inter = [s.bytes_inter for s in stats]  # every hook's statistics, and plain DDP's, count what crossed hosts
    end_ticks = env_info.cpu_ticks()
    # Per step (a periodic sync's: per finished run of inner_steps steps, Run.windows): its time, compute =
    # time - exposed communication, the hook's or exchange's own phases and bytes.
    per_step = {
        "step_time_s": timer.step_times, "compute_s": [t - x for t, x in zip(timer.step_times, timer.exposed)],
        "exposed_comm_s": timer.exposed, "encode_s": [s.encode_s for s in stats], "comm_s": [s.comm_s for s in stats],
        "decode_s": [s.decode_s for s in stats], "bytes_sent": [s.bytes_sent for s in stats],
        "bytes_intra": [s.bytes_sent - x for s, x in zip(stats, inter)], "bytes_inter": inter,
    }
    windows = {name: run.windows(name, values) for name, values in per_step.items()}
    step_times = windows["step_time_s"]
    local = columns.over_steps({**windows, "train_time_s": timer.step_times,
                                "peak_bytes_sent": [s.bytes_sent for s in stats]})
    local["others_cpu_cores"] = _others_cores(run, ticks, end_ticks)
    local["cpu_steal_share"] = env_info.steal_share(ticks, end_ticks)
    local["cpu_idle_share"] = env_info.idle_share(ticks, end_ticks)
    local["load_avg"] = env_info.load_average()
    local["cores"], local["threads"] = float(os.cpu_count() or math.nan), float(torch.get_num_threads())
    # The world's steps: each the slowest rank's (a step ends when every rank's does).
    if step_times:  # the ranks run as many steps
        run.world_steps += run.aggregate(step_times, "max")
    epoch = {**columns.reduce_over_ranks(local, run.aggregate), "epoch": epoch_number}
    epoch_time = epoch["train_time_s"]
    run.train_time += epoch_time
    loss_sum, samples, targets = run.aggregate([seen.loss_sum, float(seen.samples), float(seen.targets)], "sum")
    tested = run.evaluate()
    run.note_target(tested, run.train_time)
    epoch.update({
        "train_time_s": run.train_time, **tested, "train_loss": loss_sum / max(targets, 1),
        "samples_per_s": samples / max(epoch_time, 1e-12),
        "compression_ratio": accounting.compression_ratio(run.setup.grad_numel, run.world, epoch["bytes_sent"]),
        "time_to_target_s": run.reached_at, "steps_to_target": run.reached_step,
    })
    return epoch


def _divergence(run: _Run, epoch: dict[str, Any], epoch_number: int) -> str | None:
    """Why the training diverged in this epoch (a loss or a parameter not finite), or None."""
    # The last step's update may overflow after its (finite) loss was taken: check what it left.
    finite_params = bool(torch.stack([torch.isfinite(p).all() for p in run.setup.params]).all())
    (finite_params,) = run.aggregate([float(finite_params)], "min")
    train_loss, test_loss = epoch["train_loss"], epoch["test_loss"]
    if not math.isfinite(train_loss) or not math.isfinite(test_loss):
        which, value = ("train", train_loss) if not math.isfinite(train_loss) else ("test", test_loss)
        return f"{which} loss became {value} in epoch {epoch_number}"
    if not finite_params:
        return f"a parameter became non-finite in epoch {epoch_number}"
    return None


def _train(config: dict[str, Any], report: Report | None, rank: int, world: int,
           device: torch.device, started: Callable[[], None] | None) -> dict[str, Any]:
    data = _dataset(config)
    target = _target(config, data)
    steps = _steps_per_epoch(config, len(data.train), world)
    setup = ddp_setup.build(config, data, device, steps * config["epochs"])
    sources = workloads.sources(config["model"], config["dataset"], config["imports"] or ())
    run = _Run(config, data, rank, world, device, setup, _Aggregate(world, device), target, started)
    if setup.sync.period > steps * config["epochs"]:
        raise SettingError(f"setting inner_steps: {config['inner_steps']} is more than the run's "
                           f"{steps * config['epochs']} steps ({config['epochs']} epoch(s) of {steps}): it would "
                           "never exchange")
    try:
        result = _epochs(run, steps, report, sources)
    except BaseException:
        setup.sync.close(failed=True)
        raise
    setup.sync.close()
    return result


def _epochs(run: _Run, steps: int, report: Report | None, sources: list[dict[str, str | None]]) -> dict[str, Any]:
    """Train every epoch of ``steps`` steps, reporting each; the run's result."""
    config, setup, data = run.config, run.setup, run.data
    history: list[dict[str, Any]] = []
    status, reason = "ok", None
    for epoch_number in range(1, config["epochs"] + 1):
        if config["fail_at_epoch"] == epoch_number:
            raise RuntimeError(f"fail_at_epoch={epoch_number}: failing on purpose")
        hook = setup.sync.for_epoch(epoch_number, config["warmup_epochs"])
        first_stat, ticks = len(hook.history), env_info.cpu_ticks()
        seen = _train_epoch(run, epoch_number, steps)
        epoch = _epoch_metrics(run, epoch_number, hook, first_stat, ticks, seen)
        diverged = _divergence(run, epoch, epoch_number)
        if diverged is not None:
            status, reason = "diverged", diverged
        epoch["status"] = "running" if status == "ok" and epoch_number < config["epochs"] else status
        metrics = {c.name: epoch[c.name] for c in columns.EPOCH}
        history.append(metrics)
        if status == "ok" and epoch_number == config["epochs"]:
            reason = stability.unstable_reason(history, evaluation.constant_accuracy(data, config))
            if reason is not None:
                status = metrics["status"] = "unstable"
        if report is not None:
            report(metrics)
        if status == "diverged":
            break
    return {"status": status, "reason": reason, "model_summary": setup.summary, "sources": sources,
            "final": history[-1] if history else {}, "history": history,
            "cuda_events": setup.timer.events.summary(), "step_times_s": run.world_steps}


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
