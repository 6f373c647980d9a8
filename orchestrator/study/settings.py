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
from collections.abc import Iterable
from typing import Any

import compressors
import workloads

from . import columns, settings_tables
from .workload_checks import workload_problems
from ..cluster.emulation import MAX_WORKERS_PER_HOST
from compressors.core import registry
from compressors.core.params import NAMES, RATE, SEED, Param
from compressors.sync import MERGE_ALPHA, min_gap

# The most trials a sweep may expand to: each is a dict in memory and a record on disk, and a grid of
# millions took minutes and gigabytes before failing.
MAX_TRIALS = 100_000
# torch's optimizers apply lr and weight_decay as float32 scalars (Adam divides lr by its first bias
# correction, 1 - 0.9, first): beyond float32's 3.4e38 torch refuses the step itself. Up to this bound a
# step that overflows leaves a non-finite weight, and the trial ends diverged.
OPTIMIZER_SCALAR_MAX = 1e37
# How often workers exchange (``sync``) and the settings each takes, with the defaults of those that have one
# (DiLoCo's paper: outer lr 0.7, Nesterov momentum 0.9). local_sgd's outer SGD is lr 1 without momentum.
SYNCS = ("every_step", "local_sgd", "diloco")
SYNC_KEYS: dict[str, tuple[str, ...]] = {
    "every_step": (), "local_sgd": ("inner_steps",),
    "diloco": ("inner_steps", "outer_lr", "outer_momentum", "fragments", "overlap_steps")}
SYNC_DEFAULTS: dict[str, float | int] = {"outer_lr": 0.7, "outer_momentum": 0.9, "fragments": 1, "overlap_steps": 0}
ALL_SYNC_KEYS: tuple[str, ...] = SYNC_KEYS["diloco"]
OPTIMIZERS = ("sgd", "adam", "adamw")
# The optimizers of the compressors that take the optimizer's steps (onebit_adam).
ADAMS = ("adam", "adamw")
PRECISIONS = ("fp32", "bf16", "fp16")
# Ray takes the wait for a placement group as an int64 of seconds (1e300 cannot be passed on); past
# this (11.6 days) null, waiting forever, says it.
PLACEMENT_TIMEOUT_MAX_S = 1_000_000

SWEEP: tuple[Param, ...] = (
    Param("name", None, str, doc="required; names the results folder: at most 100 letters, digits, '-', '_', '.'; "
                                 "not '.' or '..'"),
    Param("baselines", True, bool, doc="add the fp32 and fp16 baselines to the compressors"),
    Param("max_concurrent_trials", 1, int, low=1, doc="trials that run at the same time (timing studies: 1)"),
    Param("predictor_inputs", True, bool,
          doc="on an emulated cluster, run after the grid the short trials its step-time predictions need "
              "(docs/predictor.md); false: none, and predicted_step_time_s takes the sharing of cores as guessed"),
    Param("max_trials", 10_000, int, low=1, high=MAX_TRIALS,
          doc="a grid of more trials is refused before it is expanded"),
    Param("preflight", True, bool,
          doc="before Ray starts, build each distinct workload's data and model on this machine's CPU and take one "
              "step (docs/workloads.md); false: the trials find a mistake in the model or data themselves"),
    Param("imports", None, NAMES, nullable=True,
          doc="modules imported before the sweep is checked, on the driver and in every worker: module names or "
              ".py files (relative to the sweep file); a compressor they define registers itself"),
)

CLUSTER: tuple[Param, ...] = (
    Param("use_gpu", False, bool, doc="one GPU per worker, CUDA tensors"),
    Param("backend", "auto", str, choices=("auto", "gloo", "nccl"),
          doc="torch.distributed backend; auto = nccl with GPUs, else gloo"),
    Param("cpus_per_worker", 1.0, float, low=0, low_open=True, doc="CPUs Ray reserves for each worker"),
    Param("gpus_per_worker", 1.0, float, low=0, low_open=True, doc="GPUs Ray reserves for each worker (use_gpu)"),
    Param("max_failures", 0, int, low=-1, doc="restarts of a trial's workers after a failure; -1 = forever"),
    Param("threads_per_worker", None, int, low=1, high=1024, nullable=True,
          doc="torch threads of each CPU worker, the same whatever the trial's worker count, so that 1 and 2 "
              "workers compare like with like; null: on a local run, the cores over the sweep's largest "
              "num_workers; on an emulated cluster, the cores over its worker slots; joining a cluster, the node's "
              "cores over its workers"),
    Param("placement_timeout_s", 600.0, float, low=0, low_open=True, high=PLACEMENT_TIMEOUT_MAX_S, nullable=True,
          doc="seconds a trial's workers may wait for resources before it fails (with max_concurrent_trials "
              "> 1 the wait for other trials counts); null: wait as long as it takes"),
    Param("startup_timeout_s", 600.0, float, low=0, low_open=True, high=PLACEMENT_TIMEOUT_MAX_S, nullable=True,
          doc="seconds a trial's workers may take from their start to the end of the first training step (data "
              "and model built), and the preflight for each workload; past it the trial fails and the sweep goes "
              "on; null: no limit"),
    Param("trial_timeout_s", None, float, low=0, low_open=True, high=PLACEMENT_TIMEOUT_MAX_S, nullable=True,
          doc="seconds a trial's workers may run in all (restarts included) before it fails and the sweep goes "
              "on; null: no limit"),
    Param("emulate", None, dict, nullable=True,
          doc="an emulated cluster on this machine for the sweep (root; keys below): up before the first "
              "trial, down after the last; null: run on a local Ray or --address"),
)

EMULATE: tuple[Param, ...] = (
    Param("hosts", None, int, low=2, high=64, doc="required: emulated hosts, one Ray node each"),
    Param("workers_per_host", 1, int, low=1, high=MAX_WORKERS_PER_HOST,
          doc="worker slots of each host, as a node has GPUs: a trial's num_workers is at most hosts x "
              "workers_per_host, Ray packs its workers onto as few hosts as hold them, and the workers of one "
              "host talk to each other unshaped"),
    Param("bandwidth", None, RATE, nullable=True,
          doc="each link's rate each way, as tc writes it; required here unless bandwidth is a sweep axis"),
)

AXES: tuple[Param, ...] = (
    Param("compressor", "fp32", str,
          doc="gradient compressor: one of the table below, or one a module of imports registers"),
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
    Param("dataset", "mnist", str,
          doc=f"training and test data: {', '.join(workloads.DATASET_NAMES)}, or the user's factory as "
              "MODULE:FACTORY or FILE.py:FACTORY (a path relative to the sweep file)"),
    Param("data_dir", None, str, nullable=True,
          doc="folder of the dataset's files (mnist: optional; cifar10, tokens, image_folder: required; synthetic, "
              "python_source: unset; a factory gets it as its first argument)"),
    Param("dataset_options", None, dict, nullable=True,
          doc="keyword options of a MODULE:FACTORY dataset (built-in datasets take theirs as workload keys)"),
    Param("model", "mlp", str,
          doc=f"network to train: {', '.join(workloads.MODEL_NAMES)}, torchvision:NAME (the vision extra), or the "
              "user's factory as MODULE:FACTORY or FILE.py:FACTORY (a path relative to the sweep file)"),
    Param("model_options", None, dict, nullable=True,
          doc="keyword options of a torchvision:NAME or MODULE:FACTORY model (built-in models take theirs as "
              "workload keys)"),
    Param("loader_workers", 0, int, low=0, high=64,
          doc="DataLoader worker processes per training worker for streamed datasets (image_folder, tokens, a "
              "factory's torch Datasets); 0: read in the training process. In-memory built-ins need none"),
    Param("epochs", 1, int, low=1, high=100_000, doc="passes over the training data"),
    Param("batch_size", 64, int, low=1, doc="samples per step on each worker"),
    Param("optimizer", "sgd", str, choices=OPTIMIZERS, doc="torch.optim.SGD, Adam or AdamW (compressor onebit_adam: "
                                                           "adam or adamw, whose steps it takes)"),
    Param("lr", 0.05, float, low=0, low_open=True, high=OPTIMIZER_SCALAR_MAX, doc="learning rate"),
    Param("momentum", None, float, low=0, high=1, nullable=True,
          doc="sgd's momentum (null: 0.9); dgc moves it into its memory, and sgd runs without; not with adam or adamw"),
    Param("weight_decay", 0.0, float, low=0, high=OPTIMIZER_SCALAR_MAX,
          doc="weight decay, as the optimizer applies it (sgd, adam: an L2 penalty in the gradient; adamw: decoupled)"),
    Param("warmup_epochs", 0, int, low=0, doc="first epochs in fp32 before the compressor takes over; < epochs"),
    Param("precision", "fp32", str, choices=PRECISIONS,
          doc="the forward pass's and loss's: fp32; bf16 (torch.autocast, CPUs and GPUs); fp16 (autocast with a "
              "gradient scaler, GPUs only). Parameters and gradients stay fp32, as the hooks get them in DDP"),
    Param("target", None, dict, nullable=True,
          doc="{metric: NAME, value: V}: the value of a test metric (test_accuracy, higher is better; test_loss, "
              "test_perplexity, lower is better) whose first crossing gives time_to_target_s; a sweep needs "
              "target or target_accuracy"),
    Param("target_accuracy", None, float, low=0, high=1, low_open=True, nullable=True,
          doc="shorthand for target: {metric: test_accuracy, value: V}"),
    Param("max_steps_per_epoch", None, int, low=1, nullable=True, doc="cap on steps per epoch (null: all)"),
    Param("eval_every_steps", None, int, low=1, nullable=True,
          doc="while the target is not reached, evaluate on the whole test set every this many steps, so "
              "time_to_target_s has the resolution of a few steps (evaluation time is not training time); "
              "null: a tenth of an epoch's steps, rounded up. Every epoch also ends with an evaluation"),
    Param("eval_samples", None, int, low=1, nullable=True,
          doc="test samples each evaluation uses, the first this many of the test set (null: all of it)"),
    Param("sync", "every_step", str, choices=SYNCS,
          doc="how often workers exchange: every_step (DDP averages the gradients, the compressor as its hook); "
              "local_sgd (each worker steps alone, the parameters averaged every inner_steps steps); diloco (the "
              "outer gradient, global minus local parameters, averaged every inner_steps steps and applied by "
              "an outer SGD with Nesterov momentum). The compressor compresses what is exchanged (docs/sync.md)"),
    Param("inner_steps", None, int, low=1, high=1_000_000, nullable=True,
          doc="local_sgd, diloco: the steps each worker takes alone between two exchanges (the papers' H); "
              "required with them"),
    Param("outer_lr", None, float, low=0, low_open=True, high=OPTIMIZER_SCALAR_MAX, nullable=True,
          doc=f"diloco: the outer SGD's learning rate (null: {SYNC_DEFAULTS['outer_lr']}, the paper's)"),
    Param("outer_momentum", None, float, low=0, high=1, nullable=True,
          doc=f"diloco: the outer SGD's Nesterov momentum (null: {SYNC_DEFAULTS['outer_momentum']}, the paper's; "
              "0: plain SGD)"),
    Param("fragments", None, int, low=1, high=1024, nullable=True,
          doc="diloco: Streaming DiLoCo's fragments, contiguous groups of parameters of about equal size, each "
              "exchanged every inner_steps steps, the fragments spread evenly between (null: 1, all at once); at "
              "most inner_steps"),
    Param("overlap_steps", None, int, low=0, high=1_000_000, nullable=True,
          doc="diloco: the inner steps an exchange runs beside before its fragment merges (Streaming DiLoCo's "
              f"tau; null: 0, blocking); below floor(inner_steps / fragments). At the merge the worker keeps "
              f"{MERGE_ALPHA} of its own parameters"),
    Param("intra", None, str, choices=compressors.INTRA_DTYPES, nullable=True,
          doc="algorithm hierarchical: the precision gradients travel in inside a host (null: fp32)"),
    Param("inter", None, str, choices=compressors.INTER_ALGORITHMS, nullable=True,
          doc="algorithm hierarchical: how the compressed chunks are averaged across hosts (null: sra)"),
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
TRAINING_KEYS: tuple[str, ...] = ("imports", "compressor", "compressor_params", "algorithm", "seed", "use_gpu",
                                  "backend", *(p.name for p in WORKLOAD))
# A trial's settings: what its trial_id hashes and the settings columns of its results.
TRIAL_KEYS: tuple[str, ...] = ("imports", "compressor", "compressor_params", "algorithm", "num_workers", "seed",
                               "bandwidth", "use_gpu", "backend", *(p.name for p in WORKLOAD))
# The baselines: every speedup is against fp32 and the 16-bit cast (fp16, or bf16 where a
# study has no fp16 trials); a sweep adds fp32 and fp16 unless told not to.
FP32 = "fp32"
SIXTEEN_BIT = ("fp16", "bf16")
BASELINES = (FP32, SIXTEEN_BIT[0])
# Settings that exist for the tests: kept in the trial records, left out of the results' tables.
TEST_HOOKS = ("fail_at_epoch", "force_nan_at_step")
# A sweep's target: one of these, given a value (null, the training loop's "no target", is refused in a sweep file).
TARGET_KEYS = ("target", "target_accuracy")


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
    """What a study may choose: the registry's ``algorithm_choices`` (none for a hook-only method)."""
    return registry.algorithm_choices(compressor)


def default_algorithm(compressor: str) -> str | None:
    """The registry's default; None (the setting's null) for a hook-only or optimizer method, which has nothing to
    choose."""
    return None if registry.own_communication(compressor) else registry.default_algorithm(compressor)


def relation_problems(settings: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """``(key, message)`` for each value that is valid alone but not with the others.

    A value the user sets is never silently ignored: a setting that the chosen
    optimizer, model or dataset does not take is an error here.
    """
    if settings.get("optimizer") in ADAMS and settings.get("momentum") is not None:
        yield "momentum", (f"{settings['optimizer']} takes no momentum (it has betas); unset momentum or use "
                           "optimizer: sgd")
    if registry.owns_momentum(settings["compressor"]):
        if settings.get("optimizer") in ADAMS:
            yield "optimizer", (f"{settings['compressor']} keeps sgd's momentum in its memory (momentum correction): "
                                "use optimizer: sgd")
        if settings.get("weight_decay"):
            # The optimizer would apply it after the exchange, outside the momentum: 1 / (1 - momentum)
            # times weaker than in the sgd it is compared with.
            yield "weight_decay", (f"{settings['compressor']} keeps sgd's momentum in its memory, which the "
                                   "optimizer's weight decay would bypass: set weight_decay: 0")
    if settings["compressor"] not in compressors.names():
        yield "compressor", (f"unknown compressor {settings['compressor']!r}; valid: {', '.join(compressors.names())}"
                             " (or one a module of imports registers)")
    yield from workload_problems(settings)
    yield from _target_problems(settings)
    if settings["warmup_epochs"] and settings["warmup_epochs"] >= settings["epochs"]:
        yield "warmup_epochs", (f"warmup_epochs={settings['warmup_epochs']} must be < epochs={settings['epochs']}, "
                                "or the compressor never runs")
    if settings["backend"] == "nccl" and not settings["use_gpu"]:
        yield "backend", "nccl needs GPUs: set use_gpu: true, or use gloo (or auto) on CPUs"
    yield from _impl_problems(settings)
    yield from _sync_problems(settings)
    yield from _optimizer_method_problems(settings)
    yield from _precision_problems(settings)
    for key in ("intra", "inter"):
        if settings.get(key) is not None and settings.get("algorithm") != "hierarchical":
            yield key, f"{key} is a setting of algorithm hierarchical; unset it or set algorithm: hierarchical"
    algorithm = settings.get("algorithm")
    if algorithm is not None and algorithm not in algorithms(settings["compressor"]):
        valid = algorithms(settings["compressor"])
        yield "algorithm", (f"algorithm {algorithm!r} is invalid for {settings['compressor']!r}; valid: "
                            + (", ".join(valid) if valid else "none (it runs its own communication)"))


def _optimizer_method_problems(settings: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """A compressor that takes the optimizer's steps (onebit_adam) with another optimizer, or with what it does
    itself (its own warm-up, exchanging every step)."""
    compressor = settings["compressor"]
    if not registry.optimizer_method(compressor):
        return
    if settings.get("optimizer") not in ADAMS:
        yield "optimizer", (f"{compressor} takes Adam's steps itself (the momentum it sends is Adam's): use "
                            "optimizer: adam or adamw")
    if settings.get("warmup_epochs"):
        yield "warmup_epochs", (f"{compressor} has a warm-up of its own (its warmup_steps, gradients averaged in "
                                "fp32): set warmup_epochs: 0")


def _precision_problems(settings: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """fp16 on CPUs, or where the ranks' gradient scalers could disagree on skipping a step."""
    if settings.get("precision") != "fp16":
        return
    if not settings.get("use_gpu"):
        yield "precision", ("fp16 autocast with a gradient scaler is for GPUs (a CPU has no fast fp16 matrix "
                            "products): use precision: bf16 on CPUs, or set use_gpu: true")
    own = "sync " + settings["sync"] if (settings.get("sync") or "every_step") != "every_step" else None
    own = own or (settings["compressor"] if registry.optimizer_method(settings["compressor"]) else None)
    if own:
        # Each rank's scaler sees only its own gradients: one would skip a step whose exchange the others run.
        yield "precision", (f"with {own} each worker's gradient scaler sees only its own gradients, and the ranks "
                            "could disagree on skipping a step: use precision: bf16 or fp32")
    compressor = settings["compressor"]
    codec = registry.COMPRESSORS.get(compressor)
    keeps = (codec is not None and (codec.needs_error_feedback or codec.owns_momentum)) or (
        registry.hook_only(compressor) and (settings.get("compressor_params") or {}).get("use_error_feedback", True))
    if keeps and not own:
        yield "precision", (f"{compressor} keeps a residual of what it compressed, with fp16 the scaled gradients: a "
                            "step whose gradients overflow leaves inf - inf in it, NaN in every step after, and each "
                            "change of scale misweighs it; use precision: bf16")


# What to use instead of an impl whose kernels do not run on the trial's device.
_WRONG_DEVICE = {"cuda": "cuda kernels run on GPUs: set use_gpu: true, or use impl: auto or numba on CPUs",
                 "numba": "numba kernels run on CPUs: with use_gpu: true use impl: auto or cuda"}


def _impl_problems(settings: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """An impl the compressor has no kernels of, or whose kernels do not run on the trial's device: the
    registry says which."""
    impl, compressor = settings.get("impl"), settings["compressor"]
    if impl is None or compressor not in compressors.names():
        return
    if impl not in registry.impls(compressor):
        yield "impl", f"{compressor} has no {registry.KERNELS[impl]} kernels; use impl: auto or reference"
    if not registry.runs_on(impl, "cuda" if settings["use_gpu"] else "cpu"):
        yield "impl", _WRONG_DEVICE[impl]


def _sync_problems(settings: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """A sync setting that the trial's sync does not take, a missing inner_steps, a schedule that cannot run,
    and the methods that compress each step's gradients in DDP's hook only."""
    sync = settings.get("sync") or "every_step"
    for key in ALL_SYNC_KEYS:
        takers = [name for name, keys in SYNC_KEYS.items() if key in keys]
        if settings.get(key) is not None and sync not in takers:
            yield key, f"{key} is a setting of sync {' and '.join(takers)}; unset it or set sync: {takers[-1]}"
    if sync == "every_step":
        return
    compressor = settings["compressor"]
    if registry.optimizer_method(compressor):
        yield "compressor", (f"{compressor} averages inside every optimizer step: with sync {sync} use a codec "
                             "(compressor: fp32, fp16, qsgd, mx, ...)")
    elif compressor in compressors.names() and registry.hook_only(compressor):
        yield "compressor", (f"{compressor} runs as DDP's own communication hook, on every step's gradients: with "
                             f"sync {sync} use a codec (compressor: fp32, fp16, qsgd, mx, ...)")
    elif compressor in compressors.names() and registry.owns_momentum(compressor):
        yield "compressor", (f"{compressor} keeps sgd's momentum of every step in its memory: use sync: every_step, "
                             "or another codec")
    inner = settings.get("inner_steps")
    if inner is None:
        yield "inner_steps", f"sync {sync} needs inner_steps, the steps each worker takes alone between two exchanges"
        return
    fragments = settings.get("fragments") or SYNC_DEFAULTS["fragments"]
    overlap = settings.get("overlap_steps") or SYNC_DEFAULTS["overlap_steps"]
    if settings.get("overlap_steps") and settings.get("use_gpu"):
        yield "overlap_steps", ("an exchange beside the inner steps runs its collectives from a thread, which "
                                "NCCL cannot order against the training loop's own: use overlap_steps: 0 on GPUs")
    if inner < fragments:
        yield "fragments", f"fragments={fragments} must be at most inner_steps={inner}: one exchange a step at most"
    elif overlap >= min_gap(inner, fragments):
        yield "overlap_steps", (f"overlap_steps={overlap} must be below floor(inner_steps / fragments) = "
                                f"{min_gap(inner, fragments)}: a fragment's exchange merges before the next one starts")


def with_sync_defaults(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with the sync settings its sync does not take set to null and the defaults of those it
    takes filled in (a sweep's grid crosses them with every sync; the results show what ran)."""
    sync = settings.get("sync") or "every_step"
    out = dict(settings)
    for key in ALL_SYNC_KEYS:
        if key not in SYNC_KEYS[sync]:
            out[key] = None
        elif out.get(key) is None and key in SYNC_DEFAULTS:
            out[key] = SYNC_DEFAULTS[key]
    return out


def _target_problems(settings: dict[str, Any]) -> Iterable[tuple[str, str]]:
    target = settings.get("target")
    if target is None:
        return
    if settings.get("target_accuracy") is not None:
        yield "target", "give target or its shorthand target_accuracy, not both"
        return
    if set(target) != {"metric", "value"}:
        yield "target", f"target must be {{metric: NAME, value: V}}, got keys {sorted(map(str, target))}"
        return
    metric, value = target["metric"], target["value"]
    if metric not in columns.TARGET_METRICS:
        yield "target", f"target metric must be one of {', '.join(columns.TARGET_METRICS)}, got {metric!r}"
        return
    # A perplexity is exp(loss per token), a loss >= 0: at least 1.
    bound = Param("value", None, float, low=1, low_open=False) if metric == "test_perplexity" else \
        Param("value", None, float, low=0, low_open=True, high=1 if metric == "test_accuracy" else None)
    if bound.problem(bound.read(value)):
        yield "target", f"target value for {metric} must be {bound.describe()}, got {value!r}"
        return
    # A user's factory tells its task when built: the training loop checks it there (target_task_problem).
    problem = target_task_problem(metric, settings["dataset"], workloads.DATASET_TASKS.get(settings["dataset"]))
    if problem:
        yield "target", problem


def target_task_problem(metric: str, dataset: str, task: str | None) -> str | None:
    """What is wrong with a target on ``metric`` for ``dataset``, whose samples serve ``task`` (None: not known
    yet, a factory's before it is built); None if nothing. test_perplexity is a language model's alone: a
    classification's evaluation has none, and its target would never be compared."""
    if metric != "test_perplexity" or task is None or task == workloads.LANGUAGE_MODEL:
        return None
    language = [name for name, t in workloads.DATASET_TASKS.items() if t == workloads.LANGUAGE_MODEL]
    return (f"target metric test_perplexity needs a language-model dataset ({', '.join(language)}, or a factory "
            f"whose DatasetPair has task {workloads.LANGUAGE_MODEL!r}); dataset {dataset!r} serves {task}: use "
            "test_accuracy or test_loss")


def target_of(settings: dict[str, Any]) -> tuple[str, float] | None:
    """``(metric, value)`` of a trial's target (target_accuracy: test_accuracy), or None without one."""
    if settings.get("target") is not None:
        return settings["target"]["metric"], float(Param("value", None, float).read(settings["target"]["value"]))
    if settings.get("target_accuracy") is not None:
        return "test_accuracy", float(settings["target_accuracy"])
    return None


def model_options_of(settings: dict[str, Any]) -> dict[str, Any]:
    """The keyword options the model is built with: a built-in's workload keys, else model_options."""
    if workloads.model_kind(settings["model"]) == workloads.BUILTIN:
        return {p.name: settings[p.name] for p in workloads.model_options(settings["model"])}
    return dict(settings.get("model_options") or {})


def dataset_options_of(settings: dict[str, Any]) -> dict[str, Any]:
    """The keyword options the dataset is built with: a built-in's workload keys, else dataset_options."""
    if workloads.dataset_kind(settings["dataset"]) == workloads.BUILTIN:
        return {p.name: settings[p.name] for p in workloads.dataset_options(settings["dataset"])}
    return dict(settings.get("dataset_options") or {})


def check_training(given: dict[str, Any]) -> dict[str, Any]:
    """The full training-loop settings from ``given`` (defaults filled), or ValueError naming the setting.

    ``compressor_params`` are checked against the compressor's own declaration
    and completed with its defaults (seed excluded: the trial's seed drives it).
    """
    unknown = sorted(set(given) - set(TRAINING_KEYS))
    if unknown:
        raise ValueError(f"unknown training setting(s) {unknown}; valid: {sorted(TRAINING_KEYS)}")
    import_modules(_BY_NAME["imports"].check("setting", given.get("imports")))  # they may register a compressor
    config = training_defaults()
    for key, value in given.items():
        config[key] = _BY_NAME[key].check("setting", value)
    config["compressor_params"] = compressor_params_of(config["compressor"], config["compressor_params"] or {})
    for key, message in relation_problems(config):
        raise ValueError(f"setting {key}: {message}")
    return with_sync_defaults(config)


def import_modules(imports: list[str] | None) -> None:
    """Import each module of ``imports`` (a name or a .py file); ValueError names the one that fails."""
    for text in imports or ():
        try:
            workloads.import_module(text)
        except ValueError as error:
            raise ValueError(f"setting imports: {error}") from None


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


def markdown() -> str:
    """The docs' settings tables (docs/sweeps.md), generated from the declarations."""
    return settings_tables.markdown([
        ("Top level of a sweep file", SWEEP), ("`cluster:`", CLUSTER), ("`cluster: emulate:`", EMULATE),
        ("`workload:` (each may also be a `sweep:` axis)", WORKLOAD), ("`sweep:` axes only", AXES)])


if __name__ == "__main__":
    print(markdown(), end="")
