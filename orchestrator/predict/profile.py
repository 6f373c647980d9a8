"""A one-worker profile of a model's step: forward, backward and optimizer time, and when each
parameter's gradient becomes ready during backward (the input of ``perfmodel``'s bucket timeline).

The workload's first batch_size training samples; no DDP, no compression. Times are
medians over ``repeats`` steps after one warm-up step, on the trial's device where this machine has it
(a GPU trial's on a GPU, timed by CUDA events: ``CudaClock``), else on this machine's CPU.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import default_collate

import workloads

from ..study.settings import dataset_options_of, model_options_of


@dataclass(frozen=True)
class Profile:
    fwd_s: float
    bwd_s: float
    opt_s: float
    # Per parameter, in model.parameters() order: (shape, seconds into backward its gradient is ready).
    params: tuple[tuple[tuple[int, ...], float], ...]

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the profile; ``from_json`` gives back equal floats (JSON keeps a float's repr)."""
        return {"fwd_s": self.fwd_s, "bwd_s": self.bwd_s, "opt_s": self.opt_s,
                "params": [[list(shape), ready] for shape, ready in self.params]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Profile":
        """The profile ``to_json`` wrote; KeyError, TypeError or ValueError where ``data`` is not one."""
        params = tuple((tuple(int(n) for n in shape), float(ready)) for shape, ready in data["params"])
        return cls(float(data["fwd_s"]), float(data["bwd_s"]), float(data["opt_s"]), params)


def build(settings: dict[str, Any]) -> tuple[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """The trial's model, freshly initialised, and a batch of batch_size training samples (the first ones:
    a language model's token ids must be real ones)."""
    data = workloads.build_dataset(settings["dataset"], data_dir=settings["data_dir"], seed=settings["seed"],
                                   **dataset_options_of(settings))
    torch.manual_seed(settings["seed"])
    model = workloads.build_model(settings["model"], data.input_shape, data.num_classes, **model_options_of(settings))
    count = min(settings["batch_size"], len(data.train))
    if isinstance(data.train, workloads.Split):
        batch = data.train.x[:count], data.train.y[:count]
    else:
        batch = default_collate([data.train[i] for i in range(count)])
    return model, batch


class Clock:
    """Marks of a step in seconds on the device the model runs on: here the CPU's ``perf_counter``.
    ``mark`` returns a handle; ``seconds`` reads the time between two handles once the step is over."""

    def mark(self) -> Any:
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        return end - start

    def finish(self) -> None:
        """The step's work is done (a GPU's: waited for) before its marks are read."""


class CudaClock(Clock):
    """CUDA events on the current stream: the GPU's own account of when it got to each mark (kernels run
    after the CPU queued them, so the CPU's clock would time the queueing)."""

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3

    def finish(self) -> None:
        torch.cuda.synchronize()


def device_of(settings: dict[str, Any]) -> torch.device:
    """Where the profile of a trial's model runs: its GPU where the trial ran on one and this machine has one,
    else the CPU (and its split is scaled to the trial's compute time all the same)."""
    return torch.device("cuda" if settings.get("use_gpu") and torch.cuda.is_available() else "cpu")


def profile(settings: dict[str, Any], repeats: int = 5) -> Profile:
    """The profile of the trial's model on its first batch (``build``), on ``device_of(settings)``."""
    model, batch = build(settings)
    device = device_of(settings)
    return profile_model(model.to(device), tuple(t.to(device) for t in batch), repeats,
                         CudaClock() if device.type == "cuda" else Clock())


def profile_model(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], repeats: int = 5,
                  clock: Clock | None = None) -> Profile:
    """The profile of ``model`` on ``batch`` (inputs, class targets) with cross-entropy and SGD, timed by
    ``clock`` (default: the CPU's)."""
    clock = clock or Clock()
    x, y = batch
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=1e-3)
    ready: dict[int, Any] = {}

    def hook(i: int) -> Callable[[torch.Tensor], None]:
        def mark(_: torch.Tensor) -> None:
            ready[i] = clock.mark()
        return mark

    for i, p in enumerate(params):
        p.register_post_accumulate_grad_hook(hook(i))
    fwd, bwd, opt, marks = [], [], [], []
    for step in range(repeats + 1):
        optimizer.zero_grad(set_to_none=True)
        t0 = clock.mark()
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        t1 = clock.mark()
        loss.backward()
        t2 = clock.mark()
        optimizer.step()
        t3 = clock.mark()
        clock.finish()
        if step:  # the first step warms caches and allocators
            fwd.append(clock.seconds(t0, t1))
            bwd.append(clock.seconds(t1, t2))
            opt.append(clock.seconds(t2, t3))
            marks.append([clock.seconds(t1, ready[i]) for i in range(len(params))])
    per_param = tuple((tuple(p.shape), statistics.median(m[i] for m in marks)) for i, p in enumerate(params))
    return Profile(statistics.median(fwd), statistics.median(bwd), statistics.median(opt), per_param)
