"""The preflight: each distinct workload of a sweep built and stepped once on the driver, before Ray starts.

A mistake in the user's model or data would otherwise fail every trial of a sweep, each after its
workers started. Here, in seconds, each distinct workload (model, dataset, their options, data_dir,
batch_size, imports) is built on this machine's CPU: the datasets, one batch of each split at the sweep's
batch size, the model, forward, loss and backward once (the test batch forward as evaluation runs it).
What a trial would meet later is checked: a factory that raises or returns the wrong thing, an empty
split, labels out of the classes' range, an output whose shape does not fit the task, a loss that is not
finite, a parameter that gets no gradient (DDP refuses its second step). A problem is one line: the sweep
file and line of the setting, the exception's type and message, and the user's own file and line where it
was raised.

Bounded: each workload gets the sweep's ``cluster.startup_timeout_s`` (a factory that never returns is
reported, not waited for), and a model whose parameters alone would take more than a quarter of the
memory available is stepped on the meta device (shapes checked, nothing allocated). ``preflight: false``
turns it off.
"""
from __future__ import annotations

import math
import sysconfig
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import workloads

from . import env_info, settings as schema
from .failures import reason_of
from .evaluation import task_loss
from .sweep_file import Sweep, SweepFileError

# A model whose parameters take more than this share of the available memory is stepped on the meta device.
MEMORY_SHARE = 0.25
_OURS = Path(__file__).resolve().parents[2]  # the folder holding compressors/, workloads/, orchestrator/
_PACKAGES = tuple(_OURS / name for name in ("compressors", "workloads", "orchestrator"))
_LIBRARIES = tuple({Path(p).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")
                    if (p := sysconfig.get_paths().get(key))})


class Problem(Exception):
    """What the preflight found: the setting it belongs to and the one-line message."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def workload_key(trial: dict[str, Any]) -> str:
    """What tells one workload from another: the settings that build and feed the model."""
    keys = ("imports", "model", "model_options", "dataset", "dataset_options", "data_dir", "batch_size",
            *(p.name for p in workloads.MODEL_OPTIONS), *(p.name for p in workloads.DATASET_OPTIONS))
    return repr([(key, trial.get(key)) for key in keys])


def check_sweep(sweep: Sweep, data_root: Path | None = None) -> int:
    """Check each distinct workload of ``sweep`` once; SweepFileError (file:line: message) for the first
    problem. ``data_root``: where a relative data_dir lies (the working folder). Returns how many workloads
    were checked."""
    seen: dict[str, dict[str, Any]] = {}
    for trial in sweep.trials:
        seen.setdefault(workload_key(trial), trial)
    timeout = sweep.cluster.get("startup_timeout_s")
    for trial in seen.values():
        try:
            _bounded(lambda: check_workload(trial, data_root), timeout)
        except Problem as problem:
            line = sweep.lines.get(problem.key, sweep.lines.get("workload", 1))
            raise SweepFileError(sweep.path, line, f"{problem.key}: {problem} (preflight; "
                                                   "`preflight: false` skips it)") from None
    return len(seen)


def _bounded(fn: Callable[[], None], timeout_s: float | None) -> None:
    """Run ``fn`` in a thread of its own, at most ``timeout_s`` (a factory that never returns is left there:
    the process exits on the problem it raises)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            outcome.append(error)

    thread = threading.Thread(target=run, name="preflight", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise Problem("model", f"the model and data did not build and take a step within startup_timeout_s = "
                               f"{timeout_s:g} s (a factory that never returns?)")
    if outcome[0] is not None:
        raise outcome[0]


def check_workload(trial: dict[str, Any], data_root: Path | None = None) -> None:
    """Build the trial's data and model and take one step on the CPU; Problem for what a trial would meet."""
    data_dir = trial["data_dir"]
    if data_dir is not None and data_root is not None:
        data_dir = str(data_root / data_dir)
    data_key = "dataset_options" if trial.get("dataset_options") else "dataset"
    with _blamed(data_key):
        data = workloads.build_dataset(trial["dataset"], data_dir=data_dir, seed=trial["seed"],
                                       **schema.dataset_options_of(trial))
    target = schema.target_of(trial)
    problem = target and schema.target_task_problem(target[0], trial["dataset"], data.task)
    if problem:  # a factory's task is known once it is built
        raise Problem("target" if trial.get("target") is not None else "target_accuracy", problem)
    batches = {name: _first_batch(split, name, trial["batch_size"], data_key) for name, split in
               (("training", data.train), ("test", data.test))}
    for name, (_, y) in batches.items():
        _check_labels(y, name, data.num_classes, data_key)
    options = schema.model_options_of(trial)
    model_key = "model_options" if trial.get("model_options") else "model"
    torch.manual_seed(trial["seed"])
    try:
        with torch.device("meta"):
            sized = workloads.build_model(trial["model"], data.input_shape, data.num_classes, **options)
    except Exception:  # noqa: BLE001 - code that needs real tensors (a file's weights): built for real below
        sized = None
    on_meta = sized is not None and _too_large(sized)
    model = sized
    if not on_meta:
        with _blamed(model_key):
            model = workloads.build_model(trial["model"], data.input_shape, data.num_classes, **options)
    _step(model, batches, data, "meta" if on_meta else "cpu")


def _first_batch(split: Any, name: str, batch_size: int, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The first batch of a split as the training loop takes it (a Split's rows, or a DataLoader's batch)."""
    with _blamed(key):
        size = len(split)
    if size == 0:
        raise Problem(key, f"the {name} split has no samples")
    if isinstance(split, workloads.Split):
        return split.x[:batch_size], split.y[:batch_size]
    with _blamed(key):
        x, y = next(iter(DataLoader(split, batch_size=batch_size, num_workers=0)))
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise Problem(key, f"a batch of the {name} split is ({type(x).__name__}, {type(y).__name__}), not "
                                 "(tensor, tensor): its samples must be (x, y) pairs of tensors or numbers")
    return x, y


def _check_labels(y: torch.Tensor, name: str, classes: int, key: str) -> None:
    if y.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise Problem(key, f"the {name} split's targets are {y.dtype}, not integer class indices")
    low, high = (int(y.min()), int(y.max())) if y.numel() else (0, 0)
    if low < 0 or high >= classes:
        raise Problem(key, f"the {name} split's first batch holds the target {low if low < 0 else high}, "
                                 f"outside [0, {classes - 1}] (the dataset's num_classes is {classes})")


def _too_large(model: torch.nn.Module) -> bool:
    """Whether the model's parameters take more than MEMORY_SHARE of the memory available now."""
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    available = env_info.mem_available_bytes()
    return available is not None and size > MEMORY_SHARE * available


def _step(model: torch.nn.Module, batches: dict[str, tuple[torch.Tensor, torch.Tensor]],
          data: workloads.DatasetPair, device: str) -> None:
    """Forward, loss and backward of the training batch, forward of the test batch, checked."""
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    if not trainable:
        raise Problem("model", "the model has no parameter that requires a gradient: there is nothing to train "
                               "or communicate")
    x, y = (t.to(device) for t in batches["training"])
    model.train()
    with _blamed("model"):
        out = model(x)
    _check_output(out, y, data)
    with _blamed("model"):
        loss = task_loss(out, y.long())
    if device != "meta" and not math.isfinite(float(loss.detach())):
        raise Problem("model", f"the loss of the first training batch is {float(loss.detach())} before any step")
    with _blamed("model"):
        loss.backward()
    missing = [name for name, p in trainable if p.grad is None]
    if missing:
        raise Problem("model", f"{len(missing)} parameter(s) got no gradient from the loss ({', '.join(missing[:3])}"
                               f"{', ...' if len(missing) > 3 else ''}): DDP fails at the second step; remove them or "
                               "set requires_grad=False")
    x, y = (t.to(device) for t in batches["test"])
    model.eval()
    with _blamed("model"), torch.no_grad():
        out = model(x)
    _check_output(out, y, data, "test")


def _check_output(out: Any, y: torch.Tensor, data: workloads.DatasetPair, split: str = "training") -> None:
    if not isinstance(out, torch.Tensor):
        raise Problem("model", f"the model returned a {type(out).__name__}, not a tensor of logits")
    expected = (*y.shape, data.num_classes)
    if tuple(out.shape) != expected:
        task = "[batch, num_classes]" if data.task == workloads.CLASSIFICATION else "[batch, sequence, vocabulary]"
        raise Problem("model", f"on a {split} batch of targets {list(y.shape)} the model returned "
                               f"logits of shape {list(out.shape)}, not {list(expected)} ({task}; num_classes = "
                               f"{data.num_classes})")
    if not out.is_floating_point():
        raise Problem("model", f"the model returned {out.dtype} logits, not floating point")


class _blamed:
    """Within it, an exception becomes a Problem of ``key``: the exception's type and first message line, and
    where in the user's code it was raised."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, error: BaseException | None, tb: Any) -> bool:
        if error is None or isinstance(error, (Problem, KeyboardInterrupt)):
            return False
        raise Problem(self.key, describe(error)) from None


def describe(error: BaseException) -> str:
    """``Type: first message line (at FILE:LINE, in FUNCTION)``: the place is the innermost frame of the
    user's own code (not this project's, the standard library's or an installed package's); an error this
    project raised about the user's code is its message alone."""
    frames = traceback.extract_tb(error.__traceback__)
    if frames and _is_ours(frames[-1].filename) and isinstance(error, (ValueError, TypeError)) and str(error).strip():
        return str(error).strip().splitlines()[0]
    place = user_frame(frames)
    return reason_of(error) + (f" (at {place.filename}:{place.lineno}, in {place.name})" if place is not None else "")


def user_frame(frames: traceback.StackSummary) -> traceback.FrameSummary | None:
    """The innermost frame in the user's own code, or None."""
    for frame in reversed(frames):
        if not _is_ours(frame.filename) and not _is_library(frame.filename):
            return frame
    return None


def _is_ours(filename: str) -> bool:
    path = Path(filename).resolve()
    return any(path.is_relative_to(package) for package in _PACKAGES)


def _is_library(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen ...>, <string>
        return True
    path = Path(filename).resolve()
    return any(path.is_relative_to(root) for root in _LIBRARIES)
