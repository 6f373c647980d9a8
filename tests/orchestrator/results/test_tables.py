"""The results tables and summary (orchestrator/results/tables.py, summary.py) from trial records built
here (no sweep file): parameters as columns, speedups and accuracy deltas against the baselines of the
same seed or the mean over seeds, the 16-bit baseline, labels, the step-time table."""
from __future__ import annotations

import math
import statistics

import pandas as pd
import pytest

from orchestrator.results.summary import summary_markdown
from orchestrator.results.tables import settings_columns, trials_table
from orchestrator.study.settings import FP32, SIXTEEN_BIT
from tests.helpers import epochs, record


@pytest.fixture(scope="module")
def direct() -> pd.DataFrame:
    qsgd = {"params": {"bits": 4, "bucket": 512}, "algorithm": "sra"}
    records = [  # two workers: speedups exist only where something is communicated
        record("fp32", 0, epochs(10.0, 0.010, [0.85, 0.92], 0.9), workers=2),  # reaches 0.9 at 20 s
        record("fp32", 1, epochs(12.0, 0.012, [0.85, 0.96], 0.9), workers=2),  # at 24 s
        record("fp32", 0, epochs(100.0, 0.1, [0.95, 0.95], 0.9), workers=2, lr=0.05),  # another workload
        record("bf16", 0, epochs(8.0, 0.008, [0.91, 0.93], 0.9), workers=2),  # the 16-bit baseline: no fp16 trials
        record("qsgd", 0, epochs(5.0, 0.005, [0.80, 0.91], 0.9), workers=2, **qsgd),  # at 10 s
        record("qsgd", 2, epochs(6.0, 0.006, [0.80, 0.50], 0.9), workers=2, **qsgd),  # never; no baseline of seed 2
        record("qsgd", 0, epochs(5.0, 0.005, [0.80, 0.91], 0.9), workers=4, **qsgd),  # no baseline at 4 workers
    ]
    return trials_table(records).set_index("name")


def test_baseline_names_are_defined_once():
    assert FP32 == "fp32" and SIXTEEN_BIT == ("fp16", "bf16")


def test_compressor_params_become_columns_and_rows_start_with_the_baselines(direct):
    assert list(direct.compressor) == ["fp32", "fp32", "fp32", "bf16", "qsgd", "qsgd", "qsgd"]
    assert direct.loc["qsgd-lr0.1-w2-s0", "bits"] == 4 and direct.loc["qsgd-lr0.1-w2-s0", "bucket"] == 512
    assert direct.loc["fp32-lr0.1-w2-s0", ["bits", "bucket"]].isna().all()
    assert "compressor_params" not in direct.columns


def test_speedup_and_delta_against_the_same_seed_else_the_mean_over_seeds(direct):
    same_seed = direct.loc["qsgd-lr0.1-w2-s0"]
    assert same_seed.speedup_vs_fp32 == pytest.approx(20.0 / 10.0)
    assert same_seed.speedup_basis == "time_to_target"
    assert same_seed.accuracy_delta == pytest.approx(0.91 - (0.92 + 0.96) / 2)  # not the lr=0.05 trial
    other_seeds = direct.loc["qsgd-lr0.1-w2-s2"]
    assert other_seeds.speedup_vs_fp32 == pytest.approx((0.010 + 0.012) / 2 / 0.006)
    assert other_seeds.speedup_basis == "step_time"
    assert other_seeds.accuracy_delta == pytest.approx(0.50 - (0.92 + 0.96) / 2)
    alone = direct.loc["qsgd-lr0.1-w4-s0"]
    assert pd.isna(alone[["speedup_vs_fp32", "speedup_basis", "accuracy_delta"]]).all()
    assert (direct[direct.compressor == "fp32"].speedup_vs_fp32 == 1.0).all()


def test_the_16bit_baseline_is_bf16_where_there_is_no_fp16(direct):
    assert direct.loc["bf16-lr0.1-w2-s0", "speedup_vs_16bit"] == 1.0
    assert direct.loc["qsgd-lr0.1-w2-s0", "speedup_vs_16bit"] == pytest.approx(8.0 / 10.0)
    assert direct.loc["qsgd-lr0.1-w2-s2", "speedup_vs_16bit"] == pytest.approx(0.008 / 0.006)
    assert direct.loc["qsgd-lr0.1-w2-s2", "speedup_vs_16bit_basis"] == "step_time"


def test_summary_labels_configurations_in_the_one_label_format(direct):
    text = summary_markdown(direct.reset_index(), "direct")
    papers, steps = text.split("## Where a step's time went")
    lines = papers.splitlines()
    rows = [line.split(" | ")[0].removeprefix("| ") for line in lines if line.startswith("| ")][1:]
    assert rows == ["fp32 lr=0.05", "fp32 lr=0.1", "bf16 lr=0.1", "qsgd lr=0.1"]  # defaults left out
    # the step-time table: ms, step = compute + exposed comm; fp32 lr=0.1 averages its 10 and 12 ms seeds
    assert "| fp32 lr=0.1 num_workers=2 | 11.00 | 8.25 | 2.75 | 1.38 | 5.50 | 1.38 |" in steps
    qsgd = next(line for line in lines if line.startswith("| qsgd"))
    # w=2: seeds 0 and 2 (one reached the target; one speedup compared step times); w=4: one trial
    assert f"0.7050 ± {statistics.stdev([0.91, 0.50]):.4f} (n=2)" in qsgd
    assert "10.0 (n=1) (1/2 reached)" in qsgd
    assert "0.9100 (n=1) | 10.0 (n=1) | – |" in qsgd
    assert f"{statistics.fmean([2.0, 0.011 / 0.006]):.2f}x ±" in qsgd and "\\*" in qsgd


def test_the_predicted_step_time_is_a_result_never_a_setting(direct):
    """export fills predicted_step_time_s per trial: it differs between trials, yet must not become a
    label key or a speedup's grouping key (as one, it would name every configuration of an emulated run apart)."""
    trials = direct.reset_index()
    assert trials["predicted_step_time_s"].isna().all()
    trials["predicted_step_time_s"] = [0.01 * i for i in range(len(trials))]
    assert "predicted_step_time_s" not in settings_columns(trials)
    assert summary_markdown(trials, "direct") == summary_markdown(direct.reset_index(), "direct")


def test_step_time_table_is_milliseconds_per_configuration_and_worker_count(direct):
    from orchestrator.results.tables import step_time_table

    bars = step_time_table(direct.reset_index())
    assert list(bars.columns) == ["step_time", "compute", "exposed_comm", "encode", "comm", "decode"]
    assert list(bars.index) == [
        "fp32 lr=0.05 num_workers=2", "fp32 lr=0.1 num_workers=2",
        "bf16 lr=0.1 num_workers=2", "qsgd lr=0.1 num_workers=2", "qsgd lr=0.1 num_workers=4"]
    # fp32 at lr=0.1: seeds with 10 ms and 12 ms steps, three quarters of each in compute
    assert bars.loc["fp32 lr=0.1 num_workers=2", "compute"] == pytest.approx(8.25)
    assert bars[["compute", "exposed_comm"]].sum(axis=1).iloc[-1] == pytest.approx(bars["step_time"].iloc[-1])


def _timed(compressor: str, steps: list[float], workers: int = 2, seed: int = 0, others: float = 0.1) -> dict:
    """A trial whose every step is recorded (the slowest rank's), with the cores other processes used."""
    median = statistics.median(steps)
    history = epochs(median * len(steps), median, [0.5], target=0.9)  # no target reached: step-time basis
    for epoch in history:
        epoch.update(others_cpu_cores=others, load_avg=2.5, cores=2.0, threads=1.0)
    rec = record(compressor, seed, history, workers=workers)
    rec["step_times_s"] = steps
    return rec


def test_every_timing_has_its_interval_and_a_difference_within_the_noise_is_not_measurable():
    base = [0.010 + 0.001 * (i % 7) for i in range(40)]  # 10 ms to 16 ms, every value alike often
    noisy = [t * 0.98 for t in reversed(base)]            # 2% faster: within the spread of the steps
    fast = [t * 0.5 for t in base]                        # twice as fast
    trials = trials_table([_timed(FP32, base), _timed("qsgd", noisy), _timed("dynamic8", fast)])
    row = trials.set_index("compressor")
    # 40 steps: the 14th and 27th order statistics (P(B <= 13) = 0.0192 <= 0.025 < P(B <= 14) = 0.0403)
    ordered = sorted(noisy)
    assert (row.loc["qsgd", "step_time_s_lo"], row.loc["qsgd", "step_time_s_hi"]) == (ordered[13], ordered[26])
    qsgd_lo, qsgd_hi = row.loc["qsgd", "speedup_vs_fp32_lo"], row.loc["qsgd", "speedup_vs_fp32_hi"]
    assert qsgd_lo < 1.0 < qsgd_hi  # the noise covers 2%
    assert 1.0 < row.loc["dynamic8", "speedup_vs_fp32_lo"] <= 2.0 <= row.loc["dynamic8", "speedup_vs_fp32_hi"]
    summary = summary_markdown(trials, "t")
    cell = {line.split(" | ")[0].strip("| ").split()[0]: line for line in summary.splitlines()
            if line.startswith("| ") and "num_workers" not in line}
    assert "not measurable" in cell["qsgd"] and f"[{qsgd_lo:.2f}, {qsgd_hi:.2f}]" in cell["qsgd"]
    assert "not measurable" not in cell["dynamic8"] and "[" not in cell["fp32"]  # fp32 is 1 by definition
    assert "One seed per configuration" in summary and "Other processes" not in summary


def test_the_summary_says_when_other_processes_competed_for_the_cores():
    steps = [0.01 + 0.001 * (i % 5) for i in range(20)]
    summary = summary_markdown(trials_table([_timed(FP32, steps, others=0.4), _timed("qsgd", steps, others=1.04)]),
                               "t")
    assert ("Other processes than the trials' workers used 0.5 of a core or more during 1 of 2 trials (up to 1.0 "
            "of 2 cores): their timings are noisy, their intervals wide.") in summary


def test_seeds_measure_the_spread_between_runs_and_share_their_means_interval():
    base = [0.010 + 0.0001 * (i % 7) for i in range(40)]
    # fp32's runs move their steps by 1.00, 1.10, 0.90; qsgd's by 1.00, 1.05, 0.95 (qsgd 5% faster)
    moves = {FP32: (1.0, 1.1, 0.9), "qsgd": (0.95, 0.95 * 1.05, 0.95 * 0.95)}
    records = [_timed(c, [t * m for t in base], seed=s) for c, ms in moves.items() for s, m in enumerate(ms)]
    trials = trials_table(records)
    logs = [math.log(m) for ms in moves.values() for m in ms]
    residuals = [v - statistics.fmean(logs[i:i + 3]) for i in (0, 3) for v in logs[i:i + 3]]
    assert trials["between_runs_sd"].tolist() == pytest.approx([math.sqrt(sum(r * r for r in residuals) / 4)] * 6)
    qsgd = trials[trials["compressor"] == "qsgd"]
    assert qsgd["speedup_vs_fp32_lo"].nunique() == 1 and qsgd["speedup_vs_fp32_hi"].nunique() == 1
    lo, hi = qsgd["speedup_vs_fp32_lo"].iloc[0], qsgd["speedup_vs_fp32_hi"].iloc[0]
    assert lo < qsgd["speedup_vs_fp32"].mean() < hi
    assert lo < 1.0  # runs 5-10% apart cover a 5% gain: not measurable, where each run alone said it was
    alone = trials_table([records[0], records[3]]).set_index("compressor")
    assert alone.loc["qsgd", "speedup_vs_fp32_lo"] > 1.0
    summary = summary_markdown(trials, "t")
    assert "Runs of one configuration differed by 8% in median step time" in summary
    assert "One seed per configuration" not in summary


def test_the_study_line_names_a_users_file_by_its_name_not_its_folder():
    from orchestrator.results.summary import study_line

    trials = pd.DataFrame({"model": ["/home/ada/study/results/code/my_models.py:build"], "dataset": ["mnist"],
                           "num_workers": [2]})
    assert study_line(trials) == "my_models.py:build on mnist; 2 workers; links as they are (no emulation)"
