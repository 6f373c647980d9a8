"""Sweep files (orchestrator/study/sweep_file.py): the grid's expansion, baselines, per-compressor
settings, trial names and ids, emulated clusters (their bandwidths and mistakes), and the shipped
sweeps. What a sweep file is refused for: test_sweep_file_errors.py.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.study.sweep_file import SweepFileError, load_sweep, settings_of, trial_id_of
from tests.helpers import ROOT, write
from tests.helpers import SWEEP_HEADER as HEADER

SHIPPED = sorted((ROOT / "sweeps").glob("*.yaml"))

EMU_HEADER = "name: emu\nworkload: {target_accuracy: 0.5, epochs: 1}\nbaselines: false\n"


def study(extra: str) -> str:
    """HEADER plus more top-level keys (written indented in the tests)."""
    return HEADER + textwrap.dedent(extra)


def by_compressor(trials: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for trial in trials:
        out.setdefault(trial["compressor"], []).append(trial)
    return out


# ---------------------------------------------------------------- expansion


def test_grid_crosses_compressor_entries_with_the_other_axes(tmp_path):
    sweep = load_sweep(write(tmp_path, study("""\
        sweep:
          num_workers: [1, 2]
          seed: [0, 1]
          compressor:
            - fp32
            - fp16
            - dynamic8
            - {name: qsgd, bits: [2, 4, 8], bucket: [128, 512]}
            - {name: adaptive, pi: [0.01, 0.1], algorithm: [sra, allgather]}
            - onebit
        """)))
    groups = by_compressor(sweep.trials)
    assert len(sweep.trials) == (1 + 1 + 1 + 6 + 4 + 1) * 2 * 2
    assert {(t["compressor_params"]["bits"], t["compressor_params"]["bucket"]) for t in groups["qsgd"]} == {
        (b, k) for b in (2, 4, 8) for k in (128, 512)}
    assert {(t["compressor_params"]["pi"], t["algorithm"]) for t in groups["adaptive"]} == {
        (p, a) for p in (0.01, 0.1) for a in ("sra", "allgather")}
    # each compressor carries exactly its own parameters, defaults filled, in their own namespace
    assert all(t["compressor_params"] == {} for t in groups["fp32"])
    assert all(t["compressor_params"] == {"grouping": "column"} for t in groups["onebit"])
    assert {t["compressor_params"]["norm"] for t in groups["qsgd"]} == {"max"}
    assert {t["algorithm"] for t in groups["fp32"] + groups["fp16"]} == {"allreduce"}
    assert {t["algorithm"] for t in groups["dynamic8"] + groups["onebit"] + groups["qsgd"]} == {"sra"}
    for trials in groups.values():
        assert {(t["num_workers"], t["seed"]) for t in trials} >= {(w, s) for w in (1, 2) for s in (0, 1)}


@pytest.mark.parametrize("baselines, expected", [("true", {"fp32", "fp16", "qsgd"}), ("false", {"qsgd"})])
def test_baselines_are_added_unless_false(tmp_path, baselines, expected):
    sweep = load_sweep(write(tmp_path, study(f"""\
        baselines: {baselines}
        sweep:
          compressor: [{{name: qsgd, bits: 4}}]
        """)))
    assert {t["compressor"] for t in sweep.trials} == expected
    assert len(sweep.trials) == len(expected)


def test_a_baseline_listed_in_the_file_is_not_doubled(tmp_path):
    sweep = load_sweep(write(tmp_path, HEADER + "sweep:\n  compressor: [fp16, fp32, onebit]\n"))
    assert sorted(t["compressor"] for t in sweep.trials) == ["fp16", "fp32", "onebit"]


def test_top_level_algorithm_applies_only_where_supported(tmp_path):
    sweep = load_sweep(write(tmp_path, study("""\
        baselines: false
        sweep:
          algorithm: [sra, allgather]
          compressor: [fp32, onebit, powersgd]
        """)))
    algorithms = {c: sorted(str(t["algorithm"]) for t in trials) for c, trials in by_compressor(sweep.trials).items()}
    assert algorithms == {"fp32": ["allreduce"], "onebit": ["allgather", "sra"], "powersgd": ["None"]}


def test_any_workload_option_is_an_axis_and_entries_may_override_it(tmp_path):
    sweep = load_sweep(write(tmp_path, textwrap.dedent("""\
        name: t
        workload: {model: mlp, epochs: 1, target_accuracy: 0.9}
        baselines: false
        sweep:
          lr: [0.05, 0.1]
          compressor: [fp32, {name: onebit, workload: {lr: [0.01, 0.02]}}]
        """)))
    assert sorted((t["compressor"], t["lr"]) for t in sweep.trials) == [
        ("fp32", 0.05), ("fp32", 0.1), ("onebit", 0.01), ("onebit", 0.02)]


def test_trial_names_are_readable_and_ids_stable(tmp_path):
    text = study("""\
        baselines: false
        sweep:
          num_workers: [1, 2]
          seed: 0
          compressor: [{name: qsgd, bits: [2, 4], bucket: 512}, {name: onebit, workload: {fail_at_epoch: 1}}]
        """)
    first = load_sweep(write(tmp_path, text, "a.yaml")).trials
    # the same study written with other key order and spacing: same trials, same ids
    reordered = text.replace("  num_workers: [1, 2]\n  seed: 0\n", "  seed: 0\n  num_workers: [1,   2]\n")
    assert reordered != text
    second = load_sweep(write(tmp_path, reordered, "b.yaml")).trials
    assert [t["trial_id"] for t in first] == [t["trial_id"] for t in second]
    names = [t["name"] for t in first]
    assert "qsgd bits=4 num_workers=2 seed=0" in names  # bits varies; bucket is qsgd's default
    assert "onebit fail_at_epoch=1 num_workers=1 seed=0" in names
    assert len(set(names)) == len(names) == 6
    for trial in first:
        assert trial["trial_id"] == trial_id_of(settings_of(trial))
    assert len({t["trial_id"] for t in first}) == 6
    # a different setting gives a different id
    lr_changed = load_sweep(write(tmp_path, text.replace("epochs: 1", "epochs: 2"), "c.yaml")).trials
    assert not {t["trial_id"] for t in first} & {t["trial_id"] for t in lr_changed}


def test_labels_show_only_what_differs_from_the_defaults_or_varies_and_are_the_same_everywhere(tmp_path):
    from orchestrator.results.tables import config_labels, trials_table
    from orchestrator.study.records import make_record

    text = study("""\
        sweep:
          compressor: [{name: powersgd, matrix_rank: 2}, {name: adaptive, pi: [0.01, 0.05]}, dynamic8]
        """)
    trials = load_sweep(write(tmp_path, text)).trials
    names = [t["name"].removesuffix(" num_workers=1 seed=0") for t in trials]
    assert names == ["fp32", "fp16", "powersgd matrix_rank=2", "adaptive pi=0.01", "adaptive pi=0.05", "dynamic8"]
    table = trials_table([make_record(t, "ok", None, []) for t in trials])
    assert sorted(config_labels(table)) == sorted(names)  # the tables and plots write what the log wrote


def test_trials_carry_every_training_setting(tmp_path):
    from orchestrator.study import settings

    (trial,) = load_sweep(write(tmp_path, HEADER + "baselines: false\n")).trials
    assert list(settings_of(trial)) == list(settings.TRIAL_KEYS)
    assert set(settings.TRAINING_KEYS) == set(settings.TRIAL_KEYS) - {"num_workers", "bandwidth"}


def test_labels_tell_close_floats_apart(tmp_path):
    sweep = load_sweep(write(tmp_path, HEADER + "baselines: false\nsweep:\n  lr: [0.1234567, 0.1234568]\n"))
    assert [t["name"] for t in sweep.trials] == ["fp32 lr=0.1234567 num_workers=1 seed=0",
                                                  "fp32 lr=0.1234568 num_workers=1 seed=0"]


# ---------------------------------------------------------------- emulated clusters


def _sweep(tmp_path: Path, text: str) -> Path:
    return write(tmp_path, EMU_HEADER + textwrap.dedent(text))


def test_emulate_sets_every_trials_bandwidth(tmp_path):
    sweep = load_sweep(_sweep(tmp_path, """\
        cluster: {emulate: {hosts: 4, bandwidth: 100MBIT}}
        sweep: {num_workers: [2, 4], compressor: [fp32]}
        """))
    assert sweep.cluster["emulate"] == {"hosts": 4, "workers_per_host": 1, "bandwidth": "100mbit"}
    assert [t["bandwidth"] for t in sweep.trials] == ["100mbit", "100mbit"]


def test_a_bandwidth_axis_names_the_trials_and_runs_them_one_at_a_time(tmp_path):
    sweep = load_sweep(_sweep(tmp_path, """\
        cluster: {emulate: {hosts: 2}}
        sweep: {num_workers: 2, bandwidth: [100mbit, 1gbit], compressor: [fp32]}
        """))
    assert [t["name"] for t in sweep.trials] == ["fp32 bandwidth=100mbit num_workers=2 seed=0",
                                                 "fp32 bandwidth=1gbit num_workers=2 seed=0"]
    assert len({t["trial_id"] for t in sweep.trials}) == 2
    assert load_sweep(_sweep(tmp_path, "sweep: {compressor: [fp32]}\n")).trials[0]["bandwidth"] is None


@pytest.mark.parametrize("text, line, match", [
    ("cluster: {emulate: {bandwidth: 1gbit}}\n", 4, "cluster.emulate needs hosts"),
    ("cluster: {emulate: {hosts: 2}}\n", 4, "needs a bandwidth"),
    ("cluster: {emulate: {hosts: 1, bandwidth: 1gbit}}\n", 4, r"hosts must be an int in \[2, 64\]"),
    ("cluster: {emulate: {host: 2, bandwidth: 1gbit}}\n", 4, "unknown key 'host' in cluster.emulate .did you mean 'hosts'"),
    ("cluster: {emulate: {hosts: 2, bandwidth: fast}}\n", 4, "bandwidth must be a rate from 8kbit to 100gbit"),
    ("cluster: {emulate: {hosts: 2, bandwidth: 1gbit}}\nsweep: {bandwidth: [1gbit]}\n", 5, "set in both"),
    ("cluster: {emulate: {hosts: 2, bandwidth: 1gbit}}\nsweep: {num_workers: [2, 3]}\n", 5,
     r"num_workers 3 is more than the 2 workers the emulated cluster holds \(cluster.emulate: 2 hosts x 1 "
     r"workers_per_host\)"),
    ("cluster: {emulate: {hosts: 2, workers_per_host: 2, bandwidth: 1gbit}}\nsweep: {num_workers: [4, 5]}\n", 5,
     r"num_workers 5 is more than the 4 workers the emulated cluster holds \(cluster.emulate: 2 hosts x 2 "
     r"workers_per_host\)"),
    ("cluster: {emulate: {hosts: 2, workers_per_host: 0, bandwidth: 1gbit}}\n", 4,
     r"cluster.emulate.workers_per_host must be an int in \[1, 16\], got 0"),
    ("cluster: {emulate: {hosts: 2, workers_per_host: 17, bandwidth: 1gbit}}\n", 4,
     r"cluster.emulate.workers_per_host must be an int in \[1, 16\], got 17"),
    ("max_concurrent_trials: 2\ncluster: {emulate: {hosts: 2}}\nsweep: {bandwidth: [1gbit, 100mbit]}\n", 4,
     "trials run one at a time"),
    ("sweep: {bandwidth: [nanmbit]}\n", 4, r"sweep.bandwidth\[0\] must be a rate"),
])
def test_emulation_mistakes_name_the_key_and_line(tmp_path, text, line, match):
    path = _sweep(tmp_path, text)
    with pytest.raises(SweepFileError, match=match) as error:
        load_sweep(path)
    assert error.value.line == line and str(error.value).startswith(f"{path}:{line}: ")


def test_workers_per_host_lets_a_trial_fill_the_hosts(tmp_path):
    sweep = load_sweep(_sweep(tmp_path, """\
        cluster: {emulate: {hosts: 2, workers_per_host: 2, bandwidth: 1gbit}}
        sweep: {num_workers: [1, 2, 3, 4], compressor: [fp32]}
        """))
    assert sweep.cluster["emulate"] == {"hosts": 2, "workers_per_host": 2, "bandwidth": "1gbit"}
    assert [t["num_workers"] for t in sweep.trials] == [1, 2, 3, 4]


# ---------------------------------------------------------------- the shipped sweeps


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_sweeps_validate(path, capsys, tmp_path, monkeypatch):
    # grubic reads CIFAR-10 from data/cifar10, which must exist where the sweep is started; the preflight
    # then reads its files, which only the user has
    (tmp_path / "data" / "cifar10").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    if path.name == "grubic.yaml":
        assert main(["validate", str(path)]) == 2
        assert f"{path}:10: dataset: FileNotFoundError: CIFAR-10 batch not found: " in capsys.readouterr().err
    else:
        assert main(["validate", str(path)]) == 0
    sweep = load_sweep(path)
    assert path.read_text().startswith("#"), "each shipped sweep says what it reproduces"
    assert {"fp32", "fp16"} <= {t["compressor"] for t in sweep.trials}
    assert path.name == "grubic.yaml" or f"{sweep.name}: {len(sweep.trials)} trials" in capsys.readouterr().out


def test_quickstart_is_the_cpu_study_of_six_methods_two_worker_counts_and_three_seeds():
    sweep = load_sweep(ROOT / "sweeps" / "quickstart.yaml")
    assert len(sweep.trials) == 36 and {t["seed"] for t in sweep.trials} == {0, 1, 2}
    assert {t["num_workers"] for t in sweep.trials} == {1, 2}
    assert {t["compressor"] for t in sweep.trials} == {"fp32", "fp16", "dynamic8", "qsgd", "onebit", "adaptive"}
    assert not sweep.cluster["use_gpu"]


def test_bandwidth_study_crosses_six_methods_with_two_emulated_link_rates():
    sweep = load_sweep(ROOT / "sweeps" / "bandwidth.yaml")
    assert sweep.cluster["emulate"] == {"hosts": 4, "workers_per_host": 1, "bandwidth": None}
    assert sweep.max_concurrent_trials == 1
    assert {(t["compressor"], t["bandwidth"]) for t in sweep.trials} == {
        (c, b) for c in ("fp32", "fp16", "dynamic8", "qsgd", "onebit", "adaptive") for b in ("100mbit", "1gbit")}
    assert {t["num_workers"] for t in sweep.trials} == {4}


def test_trials_run_seed_by_seed(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nworkload: {dataset: synthetic, model: mlp, epochs: 1, target_accuracy: 0.5}\n"
                    "sweep: {num_workers: [1, 2], seed: [3, 1], compressor: [fp32, fp16, onebit]}\n")
    trials = load_sweep(path).trials
    assert [t["seed"] for t in trials] == [3] * 6 + [1] * 6
    assert [(t["compressor"], t["num_workers"]) for t in trials[:6]] == \
        [(t["compressor"], t["num_workers"]) for t in trials[6:]]
