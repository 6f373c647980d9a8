"""The results columns (orchestrator.study.columns): declared once, reduced as declared, documented."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from orchestrator.study import columns
from orchestrator.study.train_loop import _Aggregate

ROOT = Path(__file__).resolve().parents[3]


def reduce_with(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """``reduce_over_ranks`` as several ranks see it, one all_reduce call at a time: pass j gives every
    rank the combined results of the calls before j (a later call may depend on them) and records what
    each rank sends in call j, which is then combined across ranks with its op."""
    combine = {"max": max, "min": min, "sum": math.fsum}
    known: list[list[float]] = []
    while True:
        sent, results = [], []
        for values in per_rank:
            calls: list[tuple[list[float], str]] = []

            def all_reduce(v: list[float], op: str, calls=calls) -> list[float]:
                calls.append((list(v), op))
                return list(known[len(calls) - 1]) if len(calls) <= len(known) else list(v)

            results.append(columns.reduce_over_ranks(values, all_reduce))
            sent.append(calls)
        if len(sent[0]) == len(known):
            break
        op = sent[0][len(known)][1]
        known.append([combine[op](column) for column in zip(*(calls[len(known)][0] for calls in sent))])
    assert all(_same(r, results[0]) for r in results)
    return results[0]


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in
                                        ((a[k], b[k]) for k in a))


def test_each_column_reduces_over_ranks_as_declared():
    got = reduce_with([
        {"step_time_s": 0.010, "bytes_sent": 100.0, "cpu_steal_share": 0.1, "cpu_idle_share": 0.5},
        {"step_time_s": 0.030, "bytes_sent": 300.0, "cpu_steal_share": 0.3, "cpu_idle_share": 0.2},
        {"step_time_s": 0.020, "bytes_sent": 200.0, "cpu_steal_share": 0.2, "cpu_idle_share": 0.4},
    ])
    assert got == {"step_time_s": 0.030, "bytes_sent": 200.0, "cpu_steal_share": 0.3, "cpu_idle_share": 0.2}


def test_a_ranks_nan_takes_no_part_and_all_nan_stays_nan():
    nan = math.nan
    got = reduce_with([
        {"comm_s": nan, "bytes_sent": nan, "cpu_steal_share": nan, "cpu_idle_share": 0.5, "encode_s": nan},
        {"comm_s": 0.002, "bytes_sent": 40.0, "cpu_steal_share": nan, "cpu_idle_share": nan, "encode_s": nan},
    ])
    assert got["comm_s"] == 0.002 and got["bytes_sent"] == 40.0 and got["cpu_idle_share"] == 0.5
    assert math.isnan(got["cpu_steal_share"]) and math.isnan(got["encode_s"])


def test_one_rank_keeps_its_values_and_its_nans():
    got = columns.reduce_over_ranks({"step_time_s": 0.5, "comm_s": math.nan, "bytes_sent": 8.0},
                                    _Aggregate(1, None))
    assert got["step_time_s"] == 0.5 and got["bytes_sent"] == 8.0 and math.isnan(got["comm_s"])


def test_over_steps_skips_nan_and_gives_nan_for_none():
    got = columns.over_steps({"step_time_s": [3.0, 1.0, math.nan, 2.0], "bytes_sent": [1.0, 2.0],
                              "train_time_s": [0.1, 0.2, 0.3], "comm_s": [math.nan, math.nan], "encode_s": []})
    assert got["step_time_s"] == 2.0  # the median of the finite three
    assert got["bytes_sent"] == 1.5  # mean
    assert got["train_time_s"] == pytest.approx(0.6)  # sum
    assert math.isnan(got["comm_s"]) and math.isnan(got["encode_s"])


def test_the_parts_of_a_step_are_those_of_the_median_step_and_add_up_to_it():
    # Medians of parts are not parts of the median: here they would give 2 + 2 against a step of 6.
    step = [4.0, 6.0, 9.0, 5.0]
    exposed = [2.0, 4.0, 1.0, 3.0]
    got = columns.over_steps({"step_time_s": step, "compute_s": [t - x for t, x in zip(step, exposed)],
                              "exposed_comm_s": exposed})
    assert got == {"step_time_s": 5.0, "compute_s": 2.0, "exposed_comm_s": 3.0}  # the lower median step
    assert columns.median_low_index([math.nan, 2.0, 1.0, 2.0]) == 1  # the first of equal values
    assert columns.median_low_index([math.nan]) == -1


def test_the_parts_come_from_the_slowest_rank_and_add_up_to_its_step():
    got = reduce_with([
        {"step_time_s": 0.010, "compute_s": 0.009, "exposed_comm_s": 0.001},
        {"step_time_s": 0.012, "compute_s": 0.004, "exposed_comm_s": 0.008},
        {"step_time_s": 0.011, "compute_s": 0.010, "exposed_comm_s": 0.001},
    ])
    assert got == {"step_time_s": 0.012, "compute_s": 0.004, "exposed_comm_s": 0.008}
    tie = reduce_with([{"step_time_s": 1.0, "compute_s": 0.25, "exposed_comm_s": 0.75},
                       {"step_time_s": 1.0, "compute_s": 0.75, "exposed_comm_s": 0.25}])
    assert tie == {"step_time_s": 1.0, "compute_s": 0.5, "exposed_comm_s": 0.5}  # ranks that tie: their mean


def test_an_unknown_reduction_or_column_is_refused():
    with pytest.raises(ValueError, match="reduction 'mode'"):
        columns.Column("x", "s", "a doc", steps="mode")
    with pytest.raises(KeyError, match="no epoch column 'nope'"):
        columns.column("nope")


def test_columns_are_declared_once_with_a_doc():
    for group in (columns.EPOCH, columns.ID, columns.TRIAL):
        names = [c.name for c in group]
        assert len(names) == len(set(names))
        assert all(c.doc for c in group)
    # Every per-step column of trials.csv is an epoch column reduced over the epochs, or a part of one.
    assert set(columns.STEP_METRICS) <= {c.name for c in columns.EPOCH
                                         if c.epochs in ("median", "median_low") or c.part_of}
    assert {c.part_of for c in columns.EPOCH if c.part_of} == {"step_time_s"}
    assert set(columns.MODEL_COLUMNS) <= set(columns.RESULT_COLUMNS)


def test_the_training_loop_reports_exactly_the_epoch_columns(tmp_path):
    from orchestrator.study.train_loop import train

    result = train({"dataset": "synthetic", "model": "mlp", "epochs": 1, "max_steps_per_epoch": 2,
                    "batch_size": 16}, threads=1)
    assert list(result["history"][0]) == [c.name for c in columns.EPOCH]
    assert math.isnan(result["history"][0]["comm_s"])  # plain DDP: no hook times its collectives


def test_documented_columns_equal_the_declarations():
    text = (ROOT / "docs" / "results.md").read_text()
    block = re.search(r"<!-- columns:start -->\n(.*?)<!-- columns:end -->", text, re.S)
    assert block, "docs/results.md lacks the columns block"
    assert block.group(1) == columns.markdown(), \
        "docs/results.md is stale: paste `python -m orchestrator.study.columns`"
