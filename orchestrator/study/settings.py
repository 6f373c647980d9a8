"""Every setting of a study, once: name, type, default, valid range and a one-line doc.

The sweep-file reader (``sweep_file``), the training-loop CLI (``train_loop``),
the results tables and the docs' settings tables (docs/sweeps.md: ``python -m
orchestrator.study.settings``) all come from here. Model, dataset and compressor
options are declared by their owners (``workloads``, ``compressors``) and
composed here, never restated.

Settings by where they are written in a sweep file:

- top level (``SWEEP``): name, baselines, max_concurrent_trials;
- ``cluster:`` (``CLUSTER``): placement of the workers; use_gpu and backend
  also reach the training loop; ``emulate:`` inside it (``EMULATE``) brings
  up an emulated cluster for the sweep;
- ``workload:`` (``WORKLOAD``): the training loop's settings, model and dataset
  options included; each may also be a grid axis under ``sweep:``;
- ``sweep:`` axes only (``AXES``): compressor (with its own parameters, a
  separate namespace: ``compressor_params``), algorithm, num_workers, seed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any

import torch

import compressors
import workloads
from compressors.core.params import RATE, SEED, Param

# The most trials a sweep may expand to: each is a dict in memory and a record on disk, and a grid of
# millions took minutes and gigabytes before failing.
MAX_TRIALS = 100_000
# torch's optimizers apply lr and weight_decay as float32 scalars (Adam divides lr by its first bias
# correction, 1 - 0.9, first): beyond float32's 3.4e38 torch refuses the step itself. Up to this bound a
# step that overflows leaves a non-finite weight, and the trial ends diverged.
OPTIMIZER_SCALAR_MAX = 1e37
# Ray takes the wait for a placement group as an int64 of seconds (1e300 cannot be passed on); past
# this (11.6 days) null, waiting forever, says it.
PLACEMENT_TIMEOUT_MAX_S = 1_000_000

SWEEP: tuple[Param, ...] = (
    Param("name", None, str, doc="required; names the results folder: at most 100 letters, digits, '-', '_', '.'; "
                                 "not '.' or '..'"),
    Param("baselines", True, bool, doc="add the fp32 and fp16 baselines to the compressors"),
    Param("max_concurrent_trials", 1, int, low=1, doc="trials that run at the same time (timing studies: 1)"),
    Param("max_trials", 10_000, int, low=1, high=MAX_TRIALS,
          doc="a grid of more trials is refused before it is expanded"),
)

CLUSTER: tuple[Param, ...] = (
    Param("use_gpu", False, bool, doc="one GPU per worker, CUDA tensors"),
    Param("backend", "auto", str, choices=("auto", "gloo", "nccl"),
          doc="torch.distributed backend; auto = nccl with GPUs, else gloo"),
    Param("cpus_per_worker", 1.0, float, low=0, low_open=True, doc="CPUs Ray reserves for each worker"),
    Param("gpus_per_worker", 1.0, float, low=0, low_open=True, doc="GPUs Ray reserves for each worker (use_gpu)"),
    Param("max_failures", 0, int, low=-1, doc="Ray Train worker-group restarts per trial; -1 = forever"),
    Param("placement_timeout_s", 600.0, float, low=0, low_open=True, high=PLACEMENT_TIMEOUT_MAX_S, nullable=True,
          doc="seconds a trial's workers may wait for resources before it fails (with max_concurrent_trials "
              "> 1 the wait for other trials counts); null: wait as long as it takes"),
    Param("emulate", None, dict, nullable=True,
          doc="an emulated cluster on this machine for the sweep (root; keys below): up before the first "
              "trial, down after the last; null: run on a local Ray or --address"),
)

EMULATE: tuple[Param, ...] = (
    Param("hosts", None, int, low=2, high=64, doc="required: emulated hosts, one Ray node and at most one worker "
                                                   "of a trial each"),
    Param("bandwidth", None, RATE, nullable=True,
          doc="each link's rate each way, as tc writes it; required here unless bandwidth is a sweep axis"),
)

AXES: tuple[Param, ...] = (
    Param("compressor", "fp32", str, choices=compressors.NAMES, doc="gradient compressor (its table below)"),
    Param("compressor_params", None, dict, nullable=True,
          doc="the compressor's own parameters (its table below); null: its defaults"),
    Param("algorithm", None, str, choices=compressors.ALGORITHMS, nullable=True,
          doc="how compressed gradients are averaged; null: the compressor's default"),
    Param("num_workers", 1, int, low=1, doc="data-parallel workers (processes) of a trial"),
    SEED,
    Param("bandwidth", None, RATE, nullable=True,
          doc="each link's rate on an emulated cluster (cluster.emulate, or --address of `lowprec cluster up`): "
              "the links are shaped to it before the trial; null: the cluster's links as they are"),
)

_TRAINING: tuple[Param, ...] = (
    Param("dataset", "mnist", str, choices=workloads.DATASET_NAMES, doc="training and test data"),
    Param("data_dir", None, str, nullable=True,
          doc="folder of the dataset's files (mnist: optional, cifar10: required, synthetic: unset)"),
    Param("model", "mlp", str, choices=workloads.MODEL_NAMES, doc="network to train"),
    Param("epochs", 1, int, low=1, high=100_000, doc="passes over the training data"),
    Param("batch_size", 64, int, low=1, doc="samples per step on each worker"),
    Param("optimizer", "sgd", str, choices=("sgd", "adam"), doc="torch.optim.SGD or torch.optim.Adam"),
    Param("lr", 0.05, float, low=0, low_open=True, high=OPTIMIZER_SCALAR_MAX, doc="learning rate"),
    Param("momentum", None, float, low=0, high=1, nullable=True, doc="sgd's momentum (null: 0.9); not with adam"),
    Param("weight_decay", 0.0, float, low=0, high=OPTIMIZER_SCALAR_MAX, doc="L2 penalty, as the optimizer applies it"),
    Param("warmup_epochs", 0, int, low=0, doc="first epochs in fp32 before the compressor takes over; < epochs"),
    Param("target_accuracy", None, float, low=0, high=1, low_open=True, nullable=True,
          doc="test accuracy whose first crossing gives time_to_accuracy_s (required in a sweep)"),
    Param("max_steps_per_epoch", None, int, low=1, nullable=True, doc="cap on steps per epoch (null: all)"),
    Param("eval_every_steps", None, int, low=1, nullable=True,
          doc="while the target is not reached, evaluate on the whole test set every this many steps, so "
              "time_to_accuracy_s has the resolution of a few steps (evaluation time is not training time); "
              "null: a tenth of an epoch's steps, rounded up. Every epoch also ends with an evaluation"),
    Param("min_compress_numel", 1024, int, low=0, doc="smaller tensors travel uncompressed in one fp32 all_reduce"),
    Param("overlap", True, bool,
          doc="hooks return their futures unwaited, so DDP overlaps communication with backward; false: each "
              "bucket's collectives run to completion in its hook (exact per-phase timing)"),
    Param("bucket_cap_mb", None, float, low=0, low_open=True, high=1024, nullable=True,
          doc="DDP's bucket size in MiB: gradients are averaged bucket by bucket as backward produces them; "
              "null: DDP's default (25, the first bucket 1)"),
    Param("impl", "auto", str, choices=compressors.IMPLS,
          doc="the compressor's code: numba (CPU kernels), cuda (GPU kernels through CuPy), reference (torch), "
              "auto (numba on CPUs, cuda on GPUs, where the compressor has such kernels)"),
    Param("fail_at_epoch", None, int, low=1, nullable=True, doc="test hook: raise at the start of this epoch"),
    Param("force_nan_at_step", None, int, low=0, nullable=True, doc="test hook: make this step's loss NaN"),
)
WORKLOAD: tuple[Param, ...] = _TRAINING + workloads.MODEL_OPTIONS + workloads.DATASET_OPTIONS

_BY_NAME = {p.name: p for p in (*SWEEP, *CLUSTER, *AXES, *WORKLOAD)}
# What the training loop takes (CLI flags, trial settings); num_workers is a trial
# setting that only the launcher (Ray, torchrun) acts on.
TRAINING_KEYS: tuple[str, ...] = ("compressor", "compressor_params", "algorithm", "seed", "use_gpu", "backend",
                                  *(p.name for p in WORKLOAD))
# A trial's settings: what its trial_id hashes and the settings columns of its results.
TRIAL_KEYS: tuple[str, ...] = ("compressor", "compressor_params", "algorithm", "num_workers", "seed", "bandwidth",
                               "use_gpu", "backend", *(p.name for p in WORKLOAD))
# The baselines: every speedup is against fp32 and the 16-bit cast (fp16, or bf16 where a
# study has no fp16 trials); a sweep adds fp32 and fp16 unless told not to.
FP32 = "fp32"
SIXTEEN_BIT = ("fp16", "bf16")
BASELINES = (FP32, SIXTEEN_BIT[0])
# Settings that exist for the tests: kept in the trial records, left out of the results' tables.
TEST_HOOKS = ("fail_at_epoch", "force_nan_at_step")


def param(name: str) -> Param:
    """The declaration of setting ``name``."""
    return _BY_NAME[name]


def training_defaults() -> dict[str, Any]:
    """Every training-loop setting with its default."""
    return {key: _BY_NAME[key].default for key in TRAINING_KEYS}


@functools.cache
def compressor_param_names() -> tuple[str, ...]:
    """Every compressor parameter name (bits, bucket, ...), seed excluded; each is a results column."""
    names = [p.name for name in compressors.NAMES for p in compressors.params_of(name) if p.name != "seed"]
    return tuple(dict.fromkeys(names))


def algorithms(compressor: str) -> tuple[str, ...]:
    """What a study may choose: the casts stay on their native all_reduce; powersgd has nothing to choose."""
    if compressor in compressors.CASTS:
        return ("allreduce",)
    if compressor == "powersgd":
        return ()
    return compressors.algorithms(compressor)


def default_algorithm(compressor: str) -> str | None:
    return compressors.default_algorithm(compressor) if algorithms(compressor) else None


def relation_problems(settings: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """``(key, message)`` for each value that is valid alone but not with the others.

    A value the user sets is never silently ignored: a setting that the chosen
    optimizer, model or dataset does not take is an error here.
    """
    if settings.get("optimizer") == "adam" and settings.get("momentum") is not None:
        yield "momentum", "adam takes no momentum (it has betas); unset momentum or use optimizer: sgd"
    for owner, options in (("model", workloads.model_options), ("dataset", workloads.dataset_options)):
        taken = {p.name for p in options(settings[owner])}
        every = workloads.MODEL_OPTIONS if owner == "model" else workloads.DATASET_OPTIONS
        for p in every:
            if settings.get(p.name) is not None and p.name not in taken:
                yield p.name, f"{owner} {settings[owner]!r} takes no option {p.name!r}"
    if settings["dataset"] == "synthetic" and settings.get("input_shape") is not None:
        problem = _input_problem(settings["model"], tuple(settings["input_shape"]))
        if problem:
            yield "input_shape", problem
    if settings.get("data_dir") is not None and workloads.DATA_DIR[settings["dataset"]] is None:
        yield "data_dir", f"dataset {settings['dataset']!r} reads no files; leave data_dir unset"
    if settings.get("data_dir") is None and workloads.DATA_DIR[settings["dataset"]] == "required":
        yield "data_dir", f"dataset {settings['dataset']!r} needs data_dir (the folder of its files)"
    if settings["warmup_epochs"] and settings["warmup_epochs"] >= settings["epochs"]:
        yield "warmup_epochs", (f"warmup_epochs={settings['warmup_epochs']} must be < epochs={settings['epochs']}, "
                                "or the compressor never runs")
    if settings["backend"] == "nccl" and not settings["use_gpu"]:
        yield "backend", "nccl needs GPUs: set use_gpu: true, or use gloo (or auto) on CPUs"
    if settings.get("impl") == "numba" and not compressors.has_numba(settings["compressor"]):
        yield "impl", f"{settings['compressor']} has no Numba kernels; use impl: auto or reference"
    if settings.get("impl") == "cuda" and not compressors.has_cuda(settings["compressor"]):
        yield "impl", f"{settings['compressor']} has no CUDA kernels; use impl: auto or reference"
    if settings.get("impl") == "cuda" and not settings["use_gpu"]:
        yield "impl", "cuda kernels run on GPUs: set use_gpu: true, or use impl: auto or numba on CPUs"
    if settings.get("impl") == "numba" and settings["use_gpu"]:
        yield "impl", "numba kernels run on CPUs: with use_gpu: true use impl: auto or cuda"
    algorithm = settings.get("algorithm")
    if algorithm is not None and algorithm not in algorithms(settings["compressor"]):
        valid = algorithms(settings["compressor"])
        yield "algorithm", (f"algorithm {algorithm!r} is invalid for {settings['compressor']!r}; valid: "
                            + (", ".join(valid) if valid else "none (it runs its own communication hook)"))


@functools.cache
def _input_problem(model: str, input_shape: tuple[int, ...]) -> str | None:
    """What ``model`` says of samples of ``input_shape`` (None: it takes them); built on the meta device,
    which allocates nothing."""
    try:
        with torch.device("meta"):
            workloads.build_model(model, input_shape, 2)
    except ValueError as error:
        return str(error)
    return None


def check_training(given: dict[str, Any]) -> dict[str, Any]:
    """The full training-loop settings from ``given`` (defaults filled), or ValueError naming the setting.

    ``compressor_params`` are checked against the compressor's own declaration
    and completed with its defaults (seed excluded: the trial's seed drives it).
    """
    unknown = sorted(set(given) - set(TRAINING_KEYS))
    if unknown:
        raise ValueError(f"unknown training setting(s) {unknown}; valid: {sorted(TRAINING_KEYS)}")
    config = training_defaults()
    for key, value in given.items():
        config[key] = _BY_NAME[key].check("setting", value)
    config["compressor_params"] = compressor_params_of(config["compressor"], config["compressor_params"] or {})
    for key, message in relation_problems(config):
        raise ValueError(f"setting {key}: {message}")
    return config


def read_compressor_params(compressor: str, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` as YAML 1.2 reads it (``Param.read``: ``1e-3`` a float), for parameters written as YAML text;
    unknown names are left to ``compressor_params_of`` to name."""
    declared = {p.name: p for p in compressors.params_of(compressor)}
    return {key: declared[key].read(value) if key in declared else value for key, value in given.items()}


def compressor_params_of(compressor: str, given: dict[str, Any]) -> dict[str, Any]:
    """The compressor's parameters, defaults filled, seed excluded; ValueError names the bad one."""
    if "seed" in given:
        raise ValueError(f"{compressor}: seed is a setting of the trial, not a compressor parameter")
    return {k: v for k, v in compressors.check_params(compressor, **given).items() if k != "seed"}


# ---------------------------------------------------------------- the docs' tables


def _default_text(p: Param) -> str:
    if p.default is None:
        return "null"
    if isinstance(p.default, bool):
        return str(p.default).lower()
    if isinstance(p.default, float) and math.isfinite(p.default) and p.default == int(p.default):
        return f"{p.default:g}"
    return str(p.default)


def _table(params: Iterable[Param], first: str = "setting") -> list[str]:
    lines = [f"| {first} | default | valid | meaning |", "|---|---|---|---|"]
    for p in params:
        lines.append(f"| `{p.name}` | `{_default_text(p)}` | {p.describe()} | {p.doc} |")
    return lines


def markdown() -> str:
    """The docs' settings tables (docs/sweeps.md), generated from the declarations."""
    out = ["#### Top level of a sweep file", "", *_table(SWEEP), "",
           "#### `cluster:`", "", *_table(CLUSTER), "",
           "#### `cluster: emulate:`", "", *_table(EMULATE), "",
           "#### `workload:` (each may also be a `sweep:` axis)", "", *_table(WORKLOAD), "",
           "#### `sweep:` axes only", "", *_table(AXES), "",
           "#### Compressor parameters (`compressor_params`; in a sweep file, keys of a compressor entry)", "",
           "| compressor | parameter | default | valid | meaning |", "|---|---|---|---|---|"]
    for name in compressors.NAMES:
        for p in compressors.params_of(name):
            if p.name != "seed":
                out.append(f"| `{name}` | `{p.name}` | `{_default_text(p)}` | {p.describe()} | {p.doc} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
