"""What a training run sets up before its first step: the process group, the model in DDP with the
compressor as its communication hook (or, with a periodic sync, the model alone and its outer loop), and
the optimizer.

fp32 over allreduce, the baseline, is plain DDP (no hook: ``compressors.ddp.PlainDDPStats`` counts its
bytes). Every other method runs through a ``HookSwitch`` that holds fp32's hook for the warm-up epochs
and the method's after. With sync local_sgd or diloco no DDP wraps the model (no all-reduce in a step):
``compressors.sync.OuterSync`` exchanges through a Reducer of the compressor every inner_steps steps
(fp32's in the warm-up epochs). Nor with a compressor that takes the optimizer's steps (onebit_adam:
``compressors.optim.OnebitAdam``), which averages inside them.

``precision`` bf16 and fp16 run the forward pass and the loss under ``torch.autocast`` (fp16 with a
gradient scaler); the parameters and their gradients stay fp32, as DDP's hooks get them.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

import workloads
from compressors import Reducer, ddp, owns_momentum
from compressors.comm.reducer import phase_group
from compressors.comm.topology import Topology, discover
from compressors.optim import OnebitAdam, warmup_steps_of
from compressors.sync import OuterSync
from compressors.core import registry
from compressors.ddp.step_clock import StepClock

from . import settings
from .step_timer import StepTimer


def _backend(config: dict[str, Any]) -> str:
    return config["backend"] if config["backend"] != "auto" else ("nccl" if config["use_gpu"] else "gloo")


def setup_distributed(config: dict[str, Any], threads: int | None) -> tuple[int, int, torch.device, bool]:
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


def comm_hook(config: dict[str, Any], compressor: str, algorithm: str | None, params: dict[str, Any],
              topology: Topology, impl: str = "auto") -> Any:
    """The hook state of ``compressor`` over ``algorithm`` with the run's settings."""
    return ddp.comm_hook(compressor, algorithm, min_compress_numel=config["min_compress_numel"],
                         seed=config["seed"], impl=impl, overlap=config["overlap"], topology=topology,
                         intra=config["intra"] or "fp32", inter=config["inter"] or "sra",
                         momentum=momentum(config) if owns_momentum(compressor) else None, **params)


def momentum(config: dict[str, Any]) -> float:
    """The trial's SGD momentum (null: 0.9): the optimizer's, or the memory's of a method that keeps it (DGC)."""
    return 0.9 if config["momentum"] is None else config["momentum"]


def optimizer(config: dict[str, Any], params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The trial's optimizer over ``params``."""
    name, lr, wd = config["optimizer"], config["lr"], config["weight_decay"]
    if name in ("adam", "adamw"):
        return (torch.optim.Adam if name == "adam" else torch.optim.AdamW)(params, lr=lr, weight_decay=wd)
    # A method that keeps the momentum in its memory (DGC's momentum correction) gets SGD without.
    return torch.optim.SGD(params, lr=lr, momentum=0.0 if owns_momentum(config["compressor"]) else momentum(config),
                           weight_decay=wd)


@dataclass
class Hooks:
    """The hook states of a run: ``warm`` for the warm-up epochs, ``main`` after (one ``PlainDDPStats`` for both,
    and no ``switch``, for plain DDP)."""

    warm: Any
    main: Any
    switch: ddp.HookSwitch | None

    def for_epoch(self, epoch: int, warmup_epochs: int) -> Any:
        """Make the epoch's hook the active one; returns it (its ``history`` gains a step's statistics per step)."""
        hook = self.warm if epoch <= warmup_epochs else self.main
        if self.switch is not None:
            self.switch.active = hook
        return hook

    period = 1  # steps between two exchanges

    def after_step(self) -> float:
        """Nothing is left to exchange after the optimizer's step (DDP did it in backward): 0 s waited."""
        return 0.0

    def end_step(self) -> None:
        if self.switch is None:  # plain DDP has no hook to count its steps
            self.main.end_step()

    @contextlib.contextmanager
    def evaluated(self) -> Iterator[None]:
        """The model as it is: every rank holds the same parameters."""
        yield

    def close(self, failed: bool = False) -> None:
        """Nothing in flight outlives a step."""


def _attach_hooks(config: dict[str, Any], model: torch.nn.parallel.DistributedDataParallel, topology: Topology,
                  grad_numel: int, clock: StepClock) -> Hooks:
    if registry.plain_ddp(config["compressor"], config["algorithm"]):
        plain = ddp.PlainDDPStats(grad_numel, topology=topology)
        return Hooks(plain, plain, None)
    main = comm_hook(config, config["compressor"], config["algorithm"], config["compressor_params"], topology,
                     config["impl"])
    warm = comm_hook(config, "fp32", None, {}, topology)
    switch = ddp.HookSwitch(warm if config["warmup_epochs"] > 0 else main, clock)
    switch.register(model, [warm, main])
    return Hooks(warm, main, switch)


def _broadcast(module: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers on every rank, as DDP's constructor makes them: a factory whose
    initialisation does not follow torch's seed starts every worker from the same model all the same."""
    if dist.get_world_size() > 1:
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor, 0)


def _outer_sync(config: dict[str, Any], params: list[torch.nn.Parameter], topology: Topology) -> OuterSync:
    """The outer loop of sync local_sgd or diloco: the compressor's Reducer over the outer gradients (over a
    process group of its own where an exchange runs beside the steps, whose collectives go on meanwhile)."""
    overlapped = bool(config["overlap_steps"])
    group = phase_group(None) if overlapped else None

    def reducer(compressor: str, algorithm: str | None, params: dict[str, Any], impl: str = "auto") -> Reducer:
        return Reducer(compressor, algorithm, min_compress_numel=config["min_compress_numel"], group=group,
                       impl=impl, topology=topology, intra=config["intra"] or "fp32", inter=config["inter"] or "sra",
                       seed=config["seed"], **params)

    main = reducer(config["compressor"], config["algorithm"], config["compressor_params"], config["impl"])
    warm = reducer("fp32", None, {}) if config["warmup_epochs"] else None
    # local SGD lands on the workers' average: lr 1 without momentum.
    diloco = config["sync"] == "diloco"
    try:
        return OuterSync(params, main, inner_steps=config["inner_steps"], warm=warm,
                         outer_lr=config["outer_lr"] if diloco else 1.0,
                         outer_momentum=config["outer_momentum"] if diloco else 0.0,
                         fragments=config["fragments"] or 1, overlap_steps=config["overlap_steps"] or 0)
    except ValueError as error:  # only the model tells how many parameter tensors there are to cut
        raise ValueError(f"setting fragments: {error}") from None


class OptimizerExchange:
    """The exchanges of an optimizer that averages inside its own step (``OnebitAdam``), as the training loop
    asks a sync for them: one a step, its wait the optimizer's."""

    period = 1  # steps between two exchanges

    def __init__(self, optimizer: OnebitAdam) -> None:
        self.optimizer = optimizer

    @property
    def history(self) -> list[Any]:
        """One ``StepStats`` per step."""
        return self.optimizer.history

    def for_epoch(self, epoch: int, warmup_epochs: int) -> OptimizerExchange:
        """The optimizer's own warm-up counts steps, not epochs: this, whatever the epoch."""
        return self

    def after_step(self) -> float:
        """The seconds the step's optimizer spent averaging."""
        return self.optimizer.waited_s

    def end_step(self) -> None:
        """Nothing: the optimizer's step closed the step's statistics."""

    @contextlib.contextmanager
    def evaluated(self) -> Iterator[None]:
        """The model as it is: every rank applies the same averaged update."""
        yield

    def close(self, failed: bool = False) -> None:
        """Nothing in flight outlives a step."""


def _onebit_adam(config: dict[str, Any], params: list[torch.nn.Parameter], topology: Topology,
                 run_steps: int) -> OnebitAdam:
    """1-bit Adam of the trial: fp32 gradients in its warm-up, then the momentum through its codec's Reducer (the
    codec's default algorithm; sra's error feedback on both sides for a biased codec)."""
    method = config["compressor_params"]
    options = dict(min_compress_numel=config["min_compress_numel"], topology=topology, seed=config["seed"])
    reducer = Reducer(method["codec"], impl=config["impl"], **options)
    return OnebitAdam(params, reducer, Reducer("fp32", **options), warmup_steps=warmup_steps_of(method, run_steps),
                      lr=config["lr"], weight_decay=config["weight_decay"], decoupled=config["optimizer"] == "adamw")


@dataclass
class Setup:
    """A run's model (``model.module`` the user's, wrapped in DDP; with a periodic sync the user's module
    itself) and what trains it; ``sync`` exchanges what the steps computed (``Hooks``: DDP's hooks, or
    ``OuterSync``)."""

    model: torch.nn.Module
    params: list[torch.nn.Parameter]
    summary: dict[str, Any]  # workloads.model_summary
    timer: StepTimer
    sync: Hooks | OuterSync | OptimizerExchange
    optimizer: torch.optim.Optimizer | OnebitAdam
    precision: str = "fp32"
    # fp16's: scales the loss so that small gradients survive fp16, skips a step whose gradients overflowed.
    scaler: torch.amp.GradScaler | None = None

    @property
    def grad_numel(self) -> int:
        return sum(p.numel() for p in self.params)

    def autocast(self) -> contextlib.AbstractContextManager:
        """The forward pass's precision: torch.autocast for bf16 and fp16, nothing for fp32."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        device = self.params[0].device.type if self.params else "cpu"
        return torch.autocast(device, dtype=torch.bfloat16 if self.precision == "bf16" else torch.float16)


def build(config: dict[str, Any], data: workloads.DatasetPair, device: torch.device, run_steps: int) -> Setup:
    """The model of ``config`` for ``data`` on ``device``, in DDP with its hooks, and its optimizer, for a run of
    ``run_steps`` steps."""
    torch.manual_seed(config["seed"])  # identical initial weights on every rank
    module = workloads.build_model(config["model"], data.input_shape, data.num_classes,
                                   **settings.model_options_of(config)).to(device)
    summary = workloads.model_summary(module, config["min_compress_numel"])
    # Which host each rank runs on: what crosses hosts (bytes_inter), and the hierarchical algorithm's levels.
    topology = discover()
    params = list(module.parameters())
    precision = config["precision"]
    if registry.optimizer_method(config["compressor"]):
        _broadcast(module)
        onebit = _onebit_adam(config, params, topology, run_steps)
        return Setup(module, params, summary, StepTimer(module, device, hooks=False), OptimizerExchange(onebit), onebit,
                     precision)
    if config["sync"] != "every_step":
        _broadcast(module)
        sync = _outer_sync(config, params, topology)
        return Setup(module, params, summary, StepTimer(module, device, hooks=False), sync, optimizer(config, params),
                     precision)
    timer = StepTimer(module, device)
    # DDP also with one worker: the compressor encodes and decodes every gradient, so its cost in
    # accuracy shows, through the same hook as with many.
    model = torch.nn.parallel.DistributedDataParallel(
        module, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=config["bucket_cap_mb"])
    hooks = _attach_hooks(config, model, topology, sum(p.numel() for p in params), timer.clock)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    return Setup(model, params, summary, timer, hooks, optimizer(config, params), precision, scaler)
