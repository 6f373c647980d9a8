"""Tests of orchestrator.study.sweep_file and the `validate` command: sweep files, grid expansion, errors (no Ray)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.study.sweep_file import ConfigError, load_sweep, settings_of, trial_id_of

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "sweeps").glob("*.yaml"))

HEADER = """\
name: t
workload:
  model: mlp
  width: 8
  depth: 1
  epochs: 1
  target_accuracy: 0.9
"""


def write(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


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


def test_a_workload_key_among_compressor_parameters_is_refused(tmp_path):
    # compressor parameters and workload settings are separate namespaces: an entry's
    # workload settings go under its own 'workload:' key
    path = write(tmp_path, HEADER + "sweep:\n  compressor: [{name: onebit, lr: 0.01}]\n")
    with pytest.raises(ConfigError, match=r":9: key 'lr' is not allowed in sweep.compressor\[0\]: a workload setting"):
        load_sweep(path)


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
    assert "qsgd bits=4 bucket=512 num_workers=2 seed=0" in names
    assert "onebit fail_at_epoch=1 num_workers=1 seed=0" in names
    assert len(set(names)) == len(names) == 6
    for trial in first:
        assert trial["trial_id"] == trial_id_of(settings_of(trial))
    assert len({t["trial_id"] for t in first}) == 6
    # a different setting gives a different id
    lr_changed = load_sweep(write(tmp_path, text.replace("epochs: 1", "epochs: 2"), "c.yaml")).trials
    assert not {t["trial_id"] for t in first} & {t["trial_id"] for t in lr_changed}


def test_trials_carry_every_training_setting(tmp_path):
    from orchestrator.study import settings

    (trial,) = load_sweep(write(tmp_path, HEADER + "baselines: false\n")).trials
    assert list(settings_of(trial)) == list(settings.TRIAL_KEYS)
    assert set(settings.TRAINING_KEYS) == set(settings.TRIAL_KEYS) - {"num_workers", "bandwidth"}


def test_labels_tell_close_floats_apart(tmp_path):
    sweep = load_sweep(write(tmp_path, HEADER + "baselines: false\nsweep:\n  lr: [0.1234567, 0.1234568]\n"))
    assert [t["name"] for t in sweep.trials] == ["fp32 lr=0.1234567 num_workers=1 seed=0",
                                                  "fp32 lr=0.1234568 num_workers=1 seed=0"]


# ---------------------------------------------------------------- errors


BAD = [
    # (file text, line of the error, words the message must contain)
    (HEADER + """\
sweep:
  compressor:
    - fp32
    - fp16
    - dynamic8
    - {name: qsgd, bitz: [2, 4]}
""", 13, ["unknown key 'bitz'", "sweep.compressor[3]", "did you mean 'bits'"]),
    (HEADER.replace("  epochs: 1\n", "  epoch: 1\n"), 6, ["unknown key 'epoch'", "workload", "did you mean 'epochs'"]),
    (HEADER.replace("epochs: 1", "epochs: three"), 6, ["workload.epochs", "an int in [1, 100000]", "'three'"]),
    (HEADER.replace("epochs: 1", "epochs: 0"), 6, ["workload.epochs", "[1, 100000]"]),
    (HEADER + "  lr: .nan\n", 8, ["workload.lr", "(0, inf)", "nan"]),
    (HEADER + "  optimizer: adam\n  momentum: 0.9\n", 9, ["momentum", "adam takes no momentum"]),
    (HEADER.replace("  model: mlp\n", "  model: lenet5\n"), 4, ["lenet5", "takes no option 'width'"]),
    (HEADER + "  warmup_epochs: 1\n", 8, ["warmup_epochs=1 must be < epochs=1"]),
    (HEADER.replace("target_accuracy: 0.9", "target_accuracy: 1.5"), 7, ["workload.target_accuracy", "1.5"]),
    (HEADER + "sweep:\n  lr: [0.1,\n       -0.5]\n", 10, ["sweep.lr[1]", "-0.5"]),
    (HEADER + "sweep:\n  num_workers: [0]\n", 9, ["sweep.num_workers[0]", "[1, inf)"]),
    (HEADER + """\
sweep:
  compressor:
    - name: adaptive
      pi:
        - 0.1
        - 1.5
""", 13, ["sweep.compressor[0].pi[1]", "pi", "1.5"]),
    (HEADER + "sweep:\n  compressor: [{name: qsgd, bits: 9}]\n", 9, ["sweep.compressor[0].bits", "bits", "9"]),
    (HEADER + "sweep:\n  compressor:\n    - fp32\n    - qsdg\n", 11, ["unknown compressor 'qsdg'", "did you mean 'qsgd'"]),
    (HEADER + "sweep:\n  compressor: [{name: onebit, bits: 4}]\n", 9, ["'bits'", "onebit"]),
    (HEADER + "sweep:\n  compressor: [{name: fp32, algorithm: sra}]\n", 9, ["sweep.compressor[0].algorithm", "allreduce"]),
    (HEADER + "cluster:\n  backend: mpi\n", 9, ["cluster.backend", "gloo"]),
    (HEADER + "sweep:\n  epochs: [1, 2]\n", 9, ["'epochs'", "both workload and sweep"]),
    (HEADER + "sweep:\n  lr: [0.1, 0.2\n  seed: 0\n", 10, ["invalid YAML"]),
    (HEADER + "sweep:\n  lr: 0.1\n  lr: 0.2\n", 10, ["duplicate key 'lr'"]),
    (HEADER.replace("  target_accuracy: 0.9\n", ""), 2, ["target_accuracy"]),
    (HEADER.replace("name: t", "name: my study"), 1, ["name"]),
    (HEADER.replace("name: t", "name: .."), 1, ["name", "not '.' or '..'"]),
    (HEADER + "sweep:\n  compressor: [none]\n", 9, ["unknown compressor 'none'"]),
    (HEADER.replace("  model: mlp\n", "  model: mlpp\n"), 3, ["workload.model", "mlp"]),
]


@pytest.mark.parametrize("text, line, words", BAD, ids=[words[0] for _, _, words in BAD])
def test_bad_sweep_files_name_file_line_and_key(tmp_path, text, line, words):
    path = write(tmp_path, text, "bad.yaml")
    with pytest.raises(ConfigError) as caught:
        load_sweep(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert caught.value.line == line
    for word in words:
        assert word in message, message


def test_validate_exits_2_with_the_located_message(tmp_path):
    path = write(tmp_path, HEADER + "sweep:\n  compressor: [{name: qsgd, bitz: 4}]\n", "x.yaml")
    done = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(path)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert f"{path}:9: unknown key 'bitz' in sweep.compressor[0] (did you mean 'bits'?)" in done.stderr
    assert done.stdout == ""


def test_validate_and_dry_run_list_trials_without_importing_ray(tmp_path):
    path = write(tmp_path, HEADER + "sweep:\n  num_workers: [1, 2]\n")
    code = (
        "import sys\n"
        "from orchestrator.cli import main\n"
        f"assert main(['validate', {str(path)!r}]) == 0\n"
        f"assert main(['run', {str(path)!r}, '--dry_run', '--results', {str(tmp_path / 'r')!r}]) == 0\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    # printed twice (validate, dry run): a header and one row per trial (fp32, fp16 x 2 workers)
    assert done.stdout.count("t: 4 trials") == 2
    assert done.stdout.count("fp16 num_workers=2 seed=0") == 2
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_sweeps_validate(path, capsys, tmp_path, monkeypatch):
    # grubic reads CIFAR-10 from data/cifar10, which must exist where the sweep is started
    (tmp_path / "data" / "cifar10").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert main(["validate", str(path)]) == 0
    sweep = load_sweep(path)
    assert path.read_text().startswith("#"), "each shipped sweep says what it reproduces"
    assert {"fp32", "fp16"} <= {t["compressor"] for t in sweep.trials}
    assert f"{sweep.name}: {len(sweep.trials)} trials" in capsys.readouterr().out


def test_quickstart_is_the_twelve_trial_cpu_study():
    sweep = load_sweep(ROOT / "sweeps" / "quickstart.yaml")
    assert len(sweep.trials) == 12
    assert {t["num_workers"] for t in sweep.trials} == {1, 2}
    assert {t["compressor"] for t in sweep.trials} == {"fp32", "fp16", "dynamic8", "qsgd", "onebit", "adaptive"}
    assert not sweep.cluster["use_gpu"]


def test_bandwidth_study_crosses_six_methods_with_two_emulated_link_rates():
    sweep = load_sweep(ROOT / "sweeps" / "bandwidth.yaml")
    assert sweep.cluster["emulate"] == {"hosts": 4, "bandwidth": None}
    assert sweep.max_concurrent_trials == 1
    assert {(t["compressor"], t["bandwidth"]) for t in sweep.trials} == {
        (c, b) for c in ("fp32", "fp16", "dynamic8", "qsgd", "onebit", "adaptive") for b in ("100mbit", "1gbit")}
    assert {t["num_workers"] for t in sweep.trials} == {4}
