"""Every results column, declared once: name, unit, a one-line doc, and how it reduces.

A column of ``history.csv`` (``EPOCH``) is what the training loop reports per
epoch. Where it is measured per step it reduces over the epoch's steps
(``steps``), then over the ranks (``ranks``); a column without ``ranks`` is
computed from reduced values. A part of a step (``part_of``) is taken from
the step, rank and epoch that the whole's reductions pick, so the parts add up
to the whole in every row. A column of ``trials.csv`` (``TRIAL``) is one
value per trial: an epoch column reduced over the epochs (``epochs``), or a
comparison between trials that orchestrator.results.tables computes.

A value that is undefined is NaN (an empty cell in the tables): a step that
has no such phase, a rank without /proc/stat. Reductions skip NaN and give NaN
only where every value is NaN, so the result never depends on the order of
ranks or steps. ``python -m orchestrator.study.columns`` prints the docs' list
(docs/results.md, checked by a test).

Adding a column: declare it here, compute it where the training loop (or the
tables) can.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

STEP_REDUCTIONS = ("median", "median_low", "mean", "sum", "max")
RANK_REDUCTIONS = ("max", "min", "mean", "sum")
EPOCH_REDUCTIONS = ("median", "median_low", "last")


@dataclass(frozen=True)
class Column:
    name: str
    unit: str
    doc: str
    steps: str | None = None  # over an epoch's steps: one of STEP_REDUCTIONS
    ranks: str | None = None  # over the ranks: one of RANK_REDUCTIONS
    epochs: str | None = None  # into trials.csv, over the epochs run: one of EPOCH_REDUCTIONS
    # A part of another column's value: taken from the step, rank and epoch that column's reductions
    # pick (its median_low step, its max rank, its median_low epoch), so that the parts add up to it.
    part_of: str | None = None

    def __post_init__(self) -> None:
        for value, valid in ((self.steps, STEP_REDUCTIONS), (self.ranks, RANK_REDUCTIONS),
                             (self.epochs, EPOCH_REDUCTIONS)):
            if value is not None and value not in valid:
                raise ValueError(f"column {self.name}: reduction {value!r}; valid: {valid}")

    def how(self) -> str:
        """How the value is reduced, in words (the docs' list)."""
        if self.part_of:
            return (f"of the step that {self.part_of} picks: the same step, rank and epoch, "
                    f"so the parts add up to {self.part_of}")
        parts = []
        if self.steps:
            parts.append(f"{self.steps} over the epoch's steps")
        if self.ranks:
            parts.append(f"{self.ranks} over ranks")
        if self.epochs:
            parts.append("trials.csv: the last epoch's" if self.epochs == "last" else
                         f"trials.csv: {self.epochs} over epochs")
        return "; ".join(parts)


# history.csv: what the training loop reports after each epoch, in this order.
EPOCH: tuple[Column, ...] = (
    Column("epoch", "", "the epoch, from 1"),
    Column("train_time_s", "s", "seconds in training steps so far (forward, backward, communication, optimizer; "
           "no start-up, no evaluation): each epoch the slowest rank's sum of its step times",
           steps="sum", ranks="max", epochs="last"),
    Column("test_accuracy", "share", "accuracy on the test set (its first eval_samples) after the epoch, in "
           "[0, 1]; a language model's: of the next token, over every position"),
    Column("test_loss", "nats", "mean cross-entropy on the test set after the epoch; a language model's: per token"),
    Column("test_perplexity", "", "exp(test_loss): a language model's perplexity per token; empty for "
           "classification"),
    Column("train_loss", "nats", "mean cross-entropy over the epoch's training samples (tokens), all ranks"),
    Column("step_time_s", "s", "seconds per training step; with sync local_sgd or diloco, the mean step of each "
           "finished run of inner_steps steps from the first step of training (in which every parameter is "
           "exchanged once), so that each holds its share of the exchanges",
           steps="median_low", ranks="max", epochs="median_low"),
    Column("samples_per_s", "samples/s", "training throughput of all workers: samples / the epoch's time",
           epochs="median"),
    Column("compute_s", "s", "of a step: forward, backward and optimizer without waiting on communication "
           "(step time minus exposed communication)", part_of="step_time_s"),
    Column("exposed_comm_s", "s", "of a step: communication backward did not hide (the hooks' main-thread part "
           "and waiting for their futures; compressors.ddp.step_clock); with a periodic sync, the wait for its "
           "exchanges", part_of="step_time_s"),
    Column("encode_s", "s", "the hook's encoding per step; overlaps the step when overlap is on",
           steps="median", ranks="max", epochs="median"),
    Column("comm_s", "s", "wall time of the hook's collectives per step, each second once; empty for plain DDP "
           "(fp32 over allreduce: no hook to time it)", steps="median", ranks="max", epochs="median"),
    Column("decode_s", "s", "the hook's decoding per step; overlaps the step when overlap is on",
           steps="median", ranks="max", epochs="median"),
    Column("bytes_sent", "bytes", "bytes one rank sends per step", steps="mean", ranks="mean", epochs="median"),
    Column("peak_bytes_sent", "bytes", "the most bytes one rank sent in one step: an exchange's where the sync is "
           "periodic (Streaming DiLoCo's fragments lower it), bytes_sent otherwise",
           steps="max", ranks="max", epochs="median"),
    Column("bytes_intra", "bytes", "of bytes_sent, what went to ranks on the same host (a ring's to the next rank, "
           "the others' to each rank alike; the hierarchical algorithm's inside the host)",
           steps="mean", ranks="mean", epochs="median"),
    Column("bytes_inter", "bytes", "of bytes_sent, what crossed to other hosts (hosts: Ray's nodes, torchrun's "
           "groups)", steps="mean", ranks="mean", epochs="median"),
    Column("cpu_steal_share", "share", "share of the machine's CPU time a hypervisor gave to other guests during "
           "the epoch's steps (0 on bare metal; empty without /proc/stat): a noisy neighbour",
           ranks="max", epochs="median"),
    Column("cpu_idle_share", "share", "share of the machine's CPU time idle or waiting for I/O during the epoch's "
           "steps (empty without /proc/stat): near 0 where the cores, not the link, set the pace",
           ranks="min", epochs="median"),
    Column("others_cpu_cores", "cores", "cores' worth of CPU time that processes other than the trial's workers "
           "used on their machine during the epoch's steps (the sweep's driver and Ray's daemons "
           "among them): busy time (neither idle nor stolen) less the workers' own, over the time passed; 0.5 or "
           "more: something else competed for the cores; empty where the workers ran on several machines or had "
           "loader_workers (child processes)",
           ranks="max", epochs="median"),
    Column("load_avg", "", "the machine's 1-minute load average at the epoch's end (runnable processes; above "
           "cores: busier than its cores, its timings noisy; empty without os.getloadavg)",
           ranks="max", epochs="median"),
    Column("cores", "", "the cores of the machine a worker ran on (os.cpu_count)", ranks="min", epochs="median"),
    Column("threads", "", "torch threads of each worker", ranks="max", epochs="median"),
    Column("compression_ratio", "ratio", "fp32 ring-allreduce bytes / bytes_sent", epochs="median"),
    Column("time_to_target_s", "s", "train_time_s at the first evaluation (every eval_every_steps steps and "
           "after each epoch) whose target metric reached the target (target, or target_accuracy); empty until "
           "then", epochs="last"),
    Column("steps_to_target", "", "training steps each worker had run at that evaluation; empty until then",
           epochs="last"),
    Column("status", "", "the loop's status after the epoch: running, ok, unstable (the last epoch) or "
           "diverged"),
)

# trials.csv: one value per trial, after the trial's id columns and settings, in this order.
ID: tuple[Column, ...] = (
    Column("trial_id", "", "the stable id of the trial (a hash of its settings, a file of the user's code by its "
           "name and contents)"),
    Column("name", "", "the trial's readable name"),
    Column("status", "", "ok; unstable (over two or more epochs, training collapsed or never learned without a "
           "NaN: the training loss ended at more than twice its lowest epoch's, or the test accuracy fell back to, "
           "or never rose above, what a constant prediction scores; orchestrator.study.stability); diverged (the training or test loss became NaN/inf, or a parameter is "
           "not finite after the epoch's last step: the loop stopped); failed (an exception, workers lost beyond "
           "max_failures, workers that could not be placed, or a time limit passed); skipped (not run: every trial "
           "whose workers ran had failed with the same reason, which it repeats; a resume runs it)"),
    Column("reason", "", "why a trial is not ok (empty otherwise)"),
)

_EPOCH = {c.name: c for c in EPOCH}
# The metrics a target may name, each with the direction that is better.
TARGET_METRICS: dict[str, str] = {"test_accuracy": "higher", "test_loss": "lower", "test_perplexity": "lower"}


def reached(metric: str, value: float, target: float) -> bool:
    """Whether ``value`` of ``metric`` is at or past ``target`` in the better direction (NaN: never)."""
    return value >= target if TARGET_METRICS[metric] == "higher" else value <= target


def column(name: str) -> Column:
    """The declaration of an epoch column (KeyError names the valid ones)."""
    if name not in _EPOCH:
        raise KeyError(f"no epoch column {name!r}; valid: {list(_EPOCH)}")
    return _EPOCH[name]


TRIAL: tuple[Column, ...] = (
    Column("epochs_run", "", "epochs reported (fewer than epochs if stopped early)"),
    Column("attempts", "", "how many times the trial's workers started: 1, more after restarts under "
           "max_failures (every result is the last attempt's), 0 if never placed"),
    Column("final_accuracy", "share", "test accuracy after the last epoch run (the last finite one)"),
    Column("best_accuracy", "share", "highest test accuracy over the epochs"),
    Column("final_loss", "nats", "test_loss after the last epoch run (the last finite one)"),
    Column("accuracy_delta", "share", "final_accuracy minus the mean final_accuracy of the ok fp32 trials of "
           "the same workload (all settings but compression and seed); negative: accuracy lost to compression"),
    Column("loss_delta", "nats", "final_loss minus the mean final_loss of the ok fp32 trials of the same workload; "
           "positive: loss added by compression"),
    column("time_to_target_s"),
    column("steps_to_target"),
    column("train_time_s"),
    Column("speedup_vs_fp32", "ratio", "with two or more workers, baseline time / own time against the ok fp32 "
           "trials of the same settings but compression (the same seed, else the mean over the others): "
           "time_to_target_s where this trial and its baseline reached the target, else step_time_s; fp32 "
           "trials get 1; empty with one worker, where nothing is communicated"),
    Column("speedup_basis", "", "which time speedup_vs_fp32 compares: time_to_target or step_time"),
    Column("speedup_vs_16bit", "ratio", "the same against the 16-bit baseline (fp16, or bf16 where a study has "
           "no fp16 trials)"),
    Column("speedup_vs_16bit_basis", "", "which time speedup_vs_16bit compares"),
    Column("overhead_vs_fp32", "ratio", "with one worker (nothing is communicated), own step_time_s / that of the "
           "ok fp32 trials of the same settings but compression: what encoding, decoding and error feedback "
           "cost; empty with more workers"),
    *(Column(f"{name}_{end}", "ratio", f"{'low' if end == 'lo' else 'high'} end of the 95% interval of {name}: a "
             "bootstrap over the steps of the trial and its baselines (and the baselines' seeds), each step the "
             "slowest rank's, and, where configurations ran more than once, over a rerun of each (between_runs_sd); "
             "an interval that includes 1 is not measurable here; empty with fewer than 2 steps")
      for name in ("speedup_vs_fp32", "speedup_vs_16bit", "overhead_vs_fp32") for end in ("lo", "hi")),
    Column("between_runs_sd", "", "how much a run moves its median step: the standard deviation of the log median "
           "step between the ok runs (seeds) of one configuration, pooled over the configurations of the trial's "
           "workload run more than once (0.05: about 5%); empty where none was"),
    column("step_time_s"),
    Column("step_time_s_lo", "s", "low end of the distribution-free 95% interval of the trial's median step: the "
           "order statistics' interval of the median of all its steps (each the slowest rank's), relative to that "
           "median, applied to step_time_s; empty with fewer than 6 steps"),
    Column("step_time_s_hi", "s", "high end of that interval"),
    Column("predicted_step_time_s", "s", "what the performance model (lowprec predict) expects of a multi-worker "
           "trial on an emulated cluster, from the one-worker trials and the sharing of cores that the sweep's "
           "predictor inputs measured (predictor_inputs/) and the calibrated link; empty elsewhere"),
    *(column(name) for name in ("compute_s", "exposed_comm_s", "encode_s", "comm_s", "decode_s",
                                "samples_per_s", "bytes_sent", "peak_bytes_sent", "bytes_intra", "bytes_inter",
                                "compression_ratio", "cpu_steal_share",
                                "cpu_idle_share", "others_cpu_cores", "load_avg", "cores", "threads")),
    Column("parameters", "", "the model's parameter count (empty for a trial that failed before training)"),
    Column("grad_bytes_fp32", "bytes", "the model's gradient bytes in fp32"),
    Column("compressible_share", "share", "share of the gradient bytes in tensors of at least "
           "min_compress_numel elements (the part a compressor acts on)"),
    Column("calibrated_bps", "bit/s", "on an emulated cluster, what a calibration all_reduce moved over each link "
           "at the trial's bandwidth (TCP goodput); empty elsewhere"),
    Column("calibrated_latency_s", "s", "the calibration's latency per message at that bandwidth"),
    Column("worker_node_ips", "", "the Ray node of each rank, in rank order, space-separated"),
)

# Per-step metrics of trials.csv: an epoch column reduced over the epochs (median, or parts of the median).
STEP_METRICS: tuple[str, ...] = tuple(c.name for c in TRIAL if c.epochs in ("median", "median_low") or c.part_of)
# workloads.model_summary of the trained model, as the training loop returned it.
MODEL_COLUMNS: tuple[str, ...] = ("parameters", "grad_bytes_fp32", "compressible_share")
ID_COLUMNS: tuple[str, ...] = tuple(c.name for c in ID)
RESULT_COLUMNS: tuple[str, ...] = tuple(c.name for c in TRIAL)


def _finite(values: Iterable[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


_STEP: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median, "median_low": statistics.median_low, "mean": statistics.fmean, "sum": math.fsum,
    "max": max}


def median_low_index(values: list[float]) -> int:
    """The index of the lower median of ``values`` (NaN ones skipped; the first of equal values):
    ``values[i] == statistics.median_low(finite values)``. -1 where none is finite."""
    kept = sorted((v, i) for i, v in enumerate(values) if not math.isnan(v))
    return kept[(len(kept) - 1) // 2][1] if kept else -1


def over_steps(per_step: dict[str, list[float]]) -> dict[str, float]:
    """An epoch's value of each column from its per-step values, as the column declares: reduced over
    the steps (NaN ones skipped; none left: NaN), or a part taken from the step its whole picks."""
    out: dict[str, float] = {}
    for name, values in per_step.items():
        c = column(name)
        if c.part_of is None:
            kept = _finite(values)
            out[name] = _STEP[c.steps](kept) if kept else math.nan
        else:
            i = median_low_index(per_step[c.part_of])
            out[name] = values[i] if i >= 0 else math.nan
    return out


def reduce_over_ranks(values: dict[str, float],
                      all_reduce: Callable[[list[float], str], list[float]]) -> dict[str, float]:
    """Each column's value reduced over the ranks as it is declared, one ``all_reduce(values, op)`` per
    reduction (op: max, min or sum; it returns the reduced list). A rank's NaN takes no part: with max,
    min and mean a flag per column says which ranks have a value; no rank has one: NaN. Parts come
    from the rank whose whole the reduction picked (the mean over ranks that tie)."""
    out: dict[str, float] = {}
    for op in RANK_REDUCTIONS:
        names = [name for name in values if column(name).ranks == op]
        if not names:
            continue
        own = [values[name] for name in names]
        if op == "sum":  # NaN anywhere makes the sum NaN, whatever the order
            out.update(zip(names, all_reduce(own, "sum")))
            continue
        has = [0.0 if math.isnan(v) else 1.0 for v in own]
        if op == "mean":
            sums = all_reduce([0.0 if math.isnan(v) else v for v in own] + has, "sum")
            totals, counts = sums[:len(names)], sums[len(names):]
            out.update((n, t / c if c else math.nan) for n, t, c in zip(names, totals, counts))
            continue
        # max or min: the flags travel with the values under the same op (negated for min).
        fill = -math.inf if op == "max" else math.inf
        sign = 1.0 if op == "max" else -1.0
        reduced = all_reduce([fill if math.isnan(v) else v for v in own] + [sign * h for h in has], op)
        out.update((n, v if sign * h > 0 else math.nan)
                   for n, v, h in zip(names, reduced[:len(names)], reduced[len(names):]))
    wholes = list(dict.fromkeys(column(name).part_of for name in values if column(name).part_of))
    for whole in wholes:
        parts = [name for name in values if column(name).part_of == whole]
        # max and min return one rank's own value exactly: the ranks that hold it give the parts.
        picked = 1.0 if values[whole] == out[whole] else 0.0
        sums = all_reduce([values[name] * picked if picked else 0.0 for name in parts] + [picked], "sum")
        out.update((name, total / sums[-1] if sums[-1] else math.nan) for name, total in zip(parts, sums))
    return out


def markdown() -> str:
    """The docs' column lists (docs/results.md), generated from the declarations."""
    def rows(columns: Iterable[Column]) -> list[str]:
        out = []
        for c in columns:
            unit = f" [{c.unit}]" if c.unit else ""
            how = f" ({c.how()})" if c.how() else ""
            out.append(f"- `{c.name}`{unit}: {c.doc}{how}.")
        return out

    lines = ["`trials.csv` / `trials.parquet`: one row per finished trial: the id columns, every setting "
             "(a compressor's parameters one column each, empty where a compressor has none), then the results.",
             "", *rows(ID), *rows(TRIAL), "",
             "`history.csv`: one row per trial and epoch: `trial_id`, `name`, the settings, then:", "",
             *rows(EPOCH)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
