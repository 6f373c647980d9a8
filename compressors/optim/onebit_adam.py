"""1-bit Adam (Tang et al., "1-bit Adam: Communication Efficient Large-Scale Training with Adam's
Convergence Speed", ICML 2021; DeepSpeed's ``OnebitAdam``, deepspeed/runtime/fp16/onebit/adam.py).

Error-compensated 1-bit compression of the gradients breaks Adam: its variance term, a nonlinear
function of the gradients, sees the compressed ones. 1-bit Adam runs ``warmup_steps`` steps of ordinary
Adam on gradients averaged in fp32, then freezes the variance and sends only the momentum: each worker
moves its momentum with its own gradient, the momenta are averaged through a ``Reducer`` of a codec
(1-bit Adam's sign with a scale, with error feedback on the worker's and the server's side over sra),
and every worker steps with the averaged momentum over the frozen variance.

Where this differs from DeepSpeed's: the warm-up is torch's Adam (or AdamW) itself, bias corrections
included, so a warm-up that covers every step is Adam with an fp32 all-reduce; after it the steps keep
Adam's form, the variance's bias correction frozen with the variance (DeepSpeed drops both corrections,
harmless after its thousands of warm-up steps, not after tens).
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch

from ..comm.reducer import Reducer
from ..comm.stats import StepStats
from ..core import registry
from ..core.params import Param

ONEBIT_ADAM = "onebit_adam"
# The percentage of a run's steps an unset warmup_steps takes: DeepSpeed's tutorials freeze after 15-25% of them.
WARMUP_PERCENT = 15


def _relations(params: dict[str, Any]) -> str | None:
    codec = params["codec"]
    if codec not in registry.COMPRESSORS:
        return f"codec={codec!r} must be one of the payload codecs: {', '.join(registry.COMPRESSORS)}"
    if registry.owns_momentum(codec):
        return f"codec={codec!r} keeps sgd's momentum in its memory; 1-bit Adam sends Adam's: use another codec"
    return None


registry.register_optimizer_method(ONEBIT_ADAM, (
    Param("warmup_steps", None, int, low=1, high=10**9, nullable=True,
          doc="steps of plain Adam on gradients averaged in fp32 before the variance freezes and the momentum is "
              f"compressed (DeepSpeed's freeze_step); null: {WARMUP_PERCENT}% of the run's steps, rounded up"),
    Param("codec", "scaledsign", str,
          doc="the codec of the momentum after the warm-up, with its default parameters and algorithm (scaledsign: "
              "1-bit Adam's sign with a scale, error feedback on both sides over sra; also qsgd, fp8, mx, fp32, ...)"),
), _relations)


def warmup_steps_of(params: dict[str, Any], run_steps: int) -> int:
    """The warm-up's steps: ``warmup_steps``, or WARMUP_PERCENT of the run's ``run_steps`` rounded up (at least 1)."""
    if params["warmup_steps"] is not None:
        return params["warmup_steps"]
    return max(1, -(-run_steps * WARMUP_PERCENT // 100))


class OnebitAdam:
    """Adam (``decoupled``: AdamW) over ``params`` whose steps average across the workers themselves: the
    gradients through ``warm`` (an fp32 all-reduce) for ``warmup_steps`` steps, then the momentum through
    ``reducer``. The model is not in DDP: nothing is averaged in backward.

    ``history`` holds one ``StepStats`` per step (the warm reducer's or the momentum's), ``waited_s`` the
    seconds the last step spent averaging (its encoding and decoding included). ``state_dict`` holds Adam's
    state, the step count and the reducers' residuals."""

    def __init__(self, params: Iterable[torch.nn.Parameter], reducer: Reducer, warm: Reducer, *, warmup_steps: int,
                 lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled: bool = False) -> None:
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps={warmup_steps} must be >= 1: the variance is frozen at its end")
        adam = torch.optim.AdamW if decoupled else torch.optim.Adam
        self.adam = adam(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        if len(self.adam.param_groups) != 1:  # the steps after the warm-up are one group's
            raise ValueError(f"OnebitAdam takes one parameter group, got {len(self.adam.param_groups)}")
        self.params: list[torch.nn.Parameter] = [p for g in self.adam.param_groups for p in g["params"]]
        self.reducer, self.warm = reducer, warm
        self.warmup_steps, self.decoupled = warmup_steps, decoupled
        self.steps = 0
        self._inverse: dict[int, torch.Tensor] = {}  # per parameter index, from the frozen variance
        self.history: list[StepStats] = []
        self.waited_s = 0.0

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.adam.param_groups

    @property
    def frozen(self) -> bool:
        """Whether the warm-up is over: the variance frozen, the momentum sent."""
        return self.steps >= self.warmup_steps

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.adam.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        """One step: average, then update (the gradients must be this worker's own)."""
        for p in self.params:
            # Every rank averages the same tensors (a parameter one rank's batch left without a gradient
            # has a zero one), so their collectives match.
            if p.grad is None and p.requires_grad:
                p.grad = torch.zeros_like(p)
        with_grads = [(i, p) for i, p in enumerate(self.params) if p.grad is not None]
        if with_grads and with_grads[0][1].is_cuda:  # what the step queued is compute, not averaging
            torch.cuda.synchronize(with_grads[0][1].device)
        if self.frozen:
            self._frozen_step(with_grads)
        else:
            start = time.perf_counter()
            stats = self.warm.average([p.grad for _, p in with_grads], [i for i, _ in with_grads])
            self.waited_s = time.perf_counter() - start
            self.adam.step()
            self.history.append(stats)
        self.steps += 1

    def _frozen_step(self, with_grads: list[tuple[int, torch.nn.Parameter]]) -> None:
        group = self.adam.param_groups[0]
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        momenta = []
        with torch.no_grad():
            for i, p in with_grads:
                state = self.adam.state[p]
                if not state:  # Adam's state begins at a parameter's first gradient
                    raise RuntimeError(f"parameter {i} had no gradient in the warm-up: its variance is unknown")
                grad = p.grad
                if wd and self.decoupled:
                    p.mul_(1 - lr * wd)
                elif wd:
                    grad = grad.add(p, alpha=wd)
                state["step"] += 1
                state["exp_avg"].lerp_(grad, 1 - beta1)  # this worker's momentum: its own gradient
                momenta.append(state["exp_avg"])
            start = time.perf_counter()
            stats = self.reducer.average(momenta, [i for i, _ in with_grads])  # in place: every worker's the same
            self.waited_s = time.perf_counter() - start
            for i, p in with_grads:
                state = self.adam.state[p]
                step_size = lr / (1 - beta1 ** float(state["step"]))
                inverse = self._inverse_denom(i, state["exp_avg_sq"], beta2, eps)
                state["exp_avg"].mul_(inverse != 0)  # DeepSpeed's exp_avg_mask: the error stops accumulating there
                p.addcmul_(state["exp_avg"], inverse, value=-step_size)
        self.history.append(stats)

    def _inverse_denom(self, index: int, exp_avg_sq: torch.Tensor, beta2: float, eps: float) -> torch.Tensor:
        """1 / (sqrt(v / (1 - beta2^warmup_steps)) + eps) of the frozen variance v (its bias correction frozen
        with it), made once; 0 where that square root is below eps. Those coordinates' gradients were
        (numerically) zero through the warm-up (the attention keys' bias, which softmax cancels; an
        embedding's unused rows): their momentum is about zero, which a sign codec sends as +-scale, and over
        eps that step would be scale / eps. They stay where they are, as DeepSpeed's exp_avg_mask keeps the
        coordinates a user names, found here instead of given."""
        inverse = self._inverse.get(index)
        if inverse is None:
            root = exp_avg_sq.sqrt() / (1 - beta2 ** self.warmup_steps) ** 0.5
            inverse = self._inverse[index] = torch.where(root >= eps, (root + eps).reciprocal(), 0.0)
        return inverse

    def state_dict(self) -> dict[str, Any]:
        """Adam's state (momentum, variance, step per parameter), the steps done and the residuals."""
        return {"adam": self.adam.state_dict(), "steps": self.steps, "warmup_steps": self.warmup_steps,
                "reducer": self.reducer.state_dict(), "warm": self.warm.state_dict()}

    def load_state_dict(self, state: dict[str, Any], device: torch.device | str | None = None) -> None:
        """Resume from ``state_dict()``'s output (each rank its own: the residuals are the rank's), the residuals
        on ``device`` (default: the parameters')."""
        if device is None:
            device = self.params[0].device if self.params else "cpu"
        if state["warmup_steps"] != self.warmup_steps:
            raise ValueError(f"state of warmup_steps={state['warmup_steps']} cannot be loaded into "
                             f"warmup_steps={self.warmup_steps}")
        self.adam.load_state_dict(state["adam"])
        self._inverse.clear()
        self.steps = state["steps"]
        self.reducer.load_state_dict(state["reducer"], device)
        self.warm.load_state_dict(state["warm"], device)
