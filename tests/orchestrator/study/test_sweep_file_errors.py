"""What a sweep file is refused for (orchestrator/study/sweep_file.py): every mistake exits before Ray
starts with the file, the line and the key: unknown keys and values out of range, names that would
escape the results folder, grids beyond the limit, bad YAML (an alias bomb, deep nesting, bytes that
are not UTF-8), merge keys and the kernels a compressor lacks. An emulated cluster's mistakes:
test_sweep_file.py.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.study.sweep_file import SweepFileError, load_sweep
from tests.helpers import SWEEP_HEADER as HEADER
from tests.helpers import TINY_SWEEP, write


def fails_at(path: Path, line: int, *words: str) -> str:
    with pytest.raises(SweepFileError) as caught:
        load_sweep(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: "), message
    for word in words:
        assert word in message, message
    return message


# ---------------------------------------------------------------- unknown keys and values out of range


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
    (HEADER + "  lr: .nan\n", 8, ["workload.lr", "(0, 1e+37]", "nan"]),
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
    (HEADER.replace("  model: mlp\n", "  model: mlpp\n"), 3, ["model: unknown model 'mlpp' (did you mean 'mlp'?)"]),
]


@pytest.mark.parametrize("text, line, words", BAD, ids=[words[0] for _, _, words in BAD])
def test_bad_sweep_files_name_file_line_and_key(tmp_path, text, line, words):
    path = write(tmp_path, text, "bad.yaml")
    with pytest.raises(SweepFileError) as caught:
        load_sweep(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert caught.value.line == line
    for word in words:
        assert word in message, message


def test_a_workload_key_among_compressor_parameters_is_refused(tmp_path):
    # compressor parameters and workload settings are separate namespaces: an entry's
    # workload settings go under its own 'workload:' key
    path = write(tmp_path, HEADER + "sweep:\n  compressor: [{name: onebit, lr: 0.01}]\n")
    with pytest.raises(SweepFileError, match=r":9: key 'lr' is not allowed in sweep.compressor\[0\]: a workload setting"):
        load_sweep(path)


BLOCK = "name: t\nworkload:\n  model: mlp\n  epochs: 2\n  target_accuracy: 0.9\n"  # what follows is line 6


@pytest.mark.parametrize("extra, line, words", [
    ("  lr: .nan\n", 6, ["workload.lr", "(0, 1e+37]"]),
    ("  momentum: .nan\n", 6, ["workload.momentum"]),
    ("  weight_decay: .nan\n", 6, ["workload.weight_decay"]),
    ("sweep:\n  target_accuracy: [.nan]\n", 7, ["both workload and sweep"]),
    ("cluster: {cpus_per_worker: .nan}\n", 6, ["cluster.cpus_per_worker"]),
    ("cluster: {gpus_per_worker: .nan}\n", 6, ["cluster.gpus_per_worker"]),
    ("sweep:\n  compressor: [{name: adaptive, pi: .nan}]\n", 7, ["pi"]),
    ("sweep:\n  seed: [4294967296]\n", 7, ["sweep.seed[0]", "4294967295"]),
    ("cluster: {backend: nccl}\n", 6, ["nccl needs GPUs"]),
    ("  dataset: synthetic\n  data_dir: somewhere\n", 7, ["data_dir"]),
    ("  data_dir: /no/such/folder\n", 6, ["data_dir", "is not a folder here"]),
    ("  warmup_epochs: 2\n", 6, ["warmup_epochs=2 must be < epochs=2"]),
    ("sweep:\n  compressor: [{name: fp32, workload: {model: lenet5, width: 8}}]\n", 7,
     ["lenet5", "takes no option 'width'"]),
    ("sweep:\n  lr: [0.1, 0.2, 0.3, 0.4, 0.5]\n  seed: [0, 1]\nmax_trials: 19\n", 9,
     ["20 trials", "max_trials=19"]),
])
def test_bad_values_are_caught_before_ray(tmp_path, extra, line, words):
    fails_at(write(tmp_path, BLOCK + extra), line, *words)


@pytest.mark.parametrize("extra, words", [
    ("  lr: .inf\n", "workload.lr must be a float in (0, 1e+37], got inf"),
    ("  lr: 1.0e+400\n", "workload.lr must be a float in (0, 1e+37], got inf"),
    ("  lr: 1.0e+300\n", "workload.lr must be a float in (0, 1e+37], got 1e+300"),
    ("  weight_decay: .inf\n", "workload.weight_decay must be a float in [0, 1e+37], got inf"),
    ("cluster: {placement_timeout_s: .inf}\n",
     "cluster.placement_timeout_s must be a float in (0, 1000000] or null, got inf"),
    ("cluster: {cpus_per_worker: .inf}\n", "cluster.cpus_per_worker must be a finite float in (0, inf), got inf"),
    ("cluster: {gpus_per_worker: -.inf}\n", "cluster.gpus_per_worker must be a finite float in (0, inf), got -inf"),
    ("sweep:\n  compressor: [{name: powersgd, min_compression_rate: .inf}]\n",
     "sweep.compressor[0].min_compression_rate must be a finite float in [0, inf), got inf"),
    ("sweep:\n  compressor: [{name: powersgd, orthogonalization_epsilon: .inf}]\n",
     "sweep.compressor[0].orthogonalization_epsilon must be a finite float in [0, inf), got inf"),
    ("max_trials: 100001\n", "max_trials must be an int in [1, 100000], got 100001"),
])
def test_infinite_and_oversized_values_are_refused(tmp_path, extra, words):
    line = len((BLOCK + extra).splitlines())
    if extra.startswith("sweep:"):
        line = 7
    fails_at(write(tmp_path, BLOCK + extra), line, words)


def test_a_float_written_without_a_dot_is_a_float(tmp_path):
    # PyYAML (YAML 1.1) reads 1e-3 as a string; people write learning rates so
    text = BLOCK + "  weight_decay: 5e-4\nsweep:\n  lr: [1e-3, 2E-2, 0.1]\n  compressor: [{name: topk, pi: 1e-2}]\n"
    sweep = load_sweep(write(tmp_path, text))
    assert sorted({t["lr"] for t in sweep.trials}) == [0.001, 0.02, 0.1]
    assert {t["weight_decay"] for t in sweep.trials} == {0.0005}
    assert {t["compressor_params"]["pi"] for t in sweep.trials if t["compressor"] == "topk"} == {0.01}


def test_a_huge_grid_is_refused_before_it_is_expanded(tmp_path):
    # 2 baselines x 200 x 200 x 100 = 8,000,000 trials, within a max_trials raised as far as it goes
    axes = {key: ", ".join(str(i) for i in range(1, n + 1)) for key, n in
            (("seed", 200), ("batch_size", 200), ("epochs", 100))}
    text = TINY_SWEEP.replace("epochs: 2, ", "") + "max_trials: 100000\nsweep:\n" + "".join(
        f"  {key}: [{values}]\n" for key, values in axes.items())
    fails_at(write(tmp_path, text), 3, "the grid has 8000000 trials, more than max_trials=100000")


def test_data_dir_gets_home_expanded_and_a_relative_one_stays_as_written(tmp_path, monkeypatch):
    # trials run in other folders: a literal "~" there is no folder; a relative data_dir the runner joins to
    # where the sweep runs, and trial ids keep it as written
    (tmp_path / "home" / "mnist").mkdir(parents=True)
    (tmp_path / "work" / "data").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "work")
    sweep = load_sweep(write(tmp_path, BLOCK + "sweep:\n  data_dir: [~/mnist, data]\n"))
    assert sorted({t["data_dir"] for t in sweep.trials}) == sorted([str(tmp_path / "home" / "mnist"), "data"])
    fails_at(write(tmp_path, BLOCK + "  data_dir: ~/cifar\n"), 6,
             f"data_dir '{tmp_path / 'home' / 'cifar'}' is not a folder here")


def test_a_synthetic_input_the_model_cannot_take_is_refused(tmp_path):
    text = BLOCK.replace("model: mlp", "model: alexnet") + "  dataset: synthetic\n  input_shape: [3, 6, 6]\n"
    fails_at(write(tmp_path, text), 7,
             "input_shape: model 'alexnet' needs images of at least 7x7 pixels, got input_shape [3, 6, 6]")


def test_placement_timeout_is_a_checked_setting(tmp_path):
    fails_at(write(tmp_path, TINY_SWEEP + "cluster: {placement_timeout_s: .nan}\n"), 3, "placement_timeout_s")
    sweep = load_sweep(write(tmp_path, TINY_SWEEP + "cluster: {placement_timeout_s: null}\n"))
    assert sweep.cluster["placement_timeout_s"] is None
    assert load_sweep(write(tmp_path, TINY_SWEEP)).cluster["placement_timeout_s"] == 600.0


def test_the_impl_setting_is_checked_against_the_compressor(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nworkload: {epochs: 2, target_accuracy: 0.9, impl: numba}\nbaselines: false\n"
                    "sweep: {compressor: [onebit, fp16]}\n")
    with pytest.raises(SweepFileError, match="fp16 has no Numba kernels"):
        load_sweep(path)
    path.write_text(path.read_text().replace("[onebit, fp16]", "[onebit, qsgd]").replace("impl: numba", "impl: reference"))
    assert {t["impl"] for t in load_sweep(path).trials} == {"reference"}
    path.write_text(path.read_text().replace("impl: reference", "impl: cuda"))
    with pytest.raises(SweepFileError, match="cuda kernels run on GPUs: set use_gpu: true"):
        load_sweep(path)
    path.write_text(path.read_text().replace("[onebit, qsgd]", "[onebit, fp16]") + "cluster: {use_gpu: true}\n")
    with pytest.raises(SweepFileError, match="fp16 has no CUDA kernels"):
        load_sweep(path)


# ---------------------------------------------------------------- names and sizes


@pytest.mark.parametrize("name", [".", "..", "a" * 101, "a/b"])
def test_sweep_names_that_escape_or_overflow_the_results_folder_are_refused(tmp_path, name):
    fails_at(write(tmp_path, TINY_SWEEP.replace("name: t", f"name: '{name}'")), 1, "name")


def test_a_100_character_sweep_name_is_valid(tmp_path):
    assert load_sweep(write(tmp_path, TINY_SWEEP.replace("name: t", "name: " + "a" * 100))).name == "a" * 100


def test_a_grid_beyond_the_default_limit_is_refused_at_once(tmp_path):
    seeds = ", ".join(str(i) for i in range(101))
    sizes = ", ".join(str(i) for i in range(1, 101))
    text = TINY_SWEEP + f"sweep:\n  seed: [{seeds}]\n  batch_size: [{sizes}]\n"
    # 2 baselines x 101 seeds x 100 batch sizes
    fails_at(write(tmp_path, text), 3, "20200 trials", "max_trials=10000")


# ---------------------------------------------------------------- YAML


def _bomb(level: int) -> str:
    """Nested aliases: 9**(level + 1) entries once expanded, a few hundred bytes written."""
    if level == 0:
        return "&a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"
    return f"&a{level} [{_bomb(level - 1)}, " + ", ".join([f"*a{level - 1}"] * 8) + "]"


@pytest.mark.parametrize("where", ["workload", "sweep"])
def test_an_alias_bomb_in_a_value_gets_a_short_message(tmp_path, where):
    text = "name: t\nworkload:\n  model: mlp\n  target_accuracy: 0.9\n"
    text += f"  lr: {_bomb(9)}\n" if where == "workload" else f"sweep:\n  lr: [{_bomb(9)}]\n"
    assert len(text) < 1000
    message = fails_at(write(tmp_path, text), 5 if where == "workload" else 6, f"{where}.lr")
    assert len(message) < 300


@pytest.mark.parametrize("text, line, words", [
    (TINY_SWEEP + "sweep:\n  lr: [0.1]\x07\n", 4, ["invalid YAML", "not allowed"]),
    (TINY_SWEEP.encode() + b"sweep:\n  lr: [0.1] # caf\xe9\n", 4, ["not UTF-8", "0xe9"]),
    (TINY_SWEEP + "sweep:\n  ? [a, b]\n  : 1\n", 4, ["a key must be a plain name"]),
    # past Python's recursion limit: PyYAML's parser runs out of frames at about 500 levels
    ("x: " + "[" * 1000 + "]" * 1000 + "\n", 1, ["nested too deeply"]),
])
def test_bad_yaml_exits_with_file_and_line(tmp_path, text, line, words):
    fails_at(write(tmp_path, text), line, *words)


def test_merge_keys_may_be_overridden(tmp_path):
    text = textwrap.dedent("""\
        name: t
        base: &base {model: mlp, width: 8, depth: 1, epochs: 1, target_accuracy: 0.9}
        workload:
          <<: *base
          epochs: 2
        """)
    # 'base' is not a key of a sweep file: a merge source must live where its keys are valid
    fails_at(write(tmp_path, text), 2, "unknown key 'base'")
    text = textwrap.dedent("""\
        name: t
        workload:
          <<: {model: mlp, width: 8, depth: 1, epochs: 1, target_accuracy: 0.9}
          epochs: 2
        sweep:
          compressor:
            - &q {name: qsgd, bits: 4}
            - {<<: *q, bits: 2}
        """)
    trials = load_sweep(write(tmp_path, text)).trials
    assert {t["epochs"] for t in trials} == {2}
    assert sorted(t["compressor_params"]["bits"] for t in trials if t["compressor"] == "qsgd") == [2, 4]
    fails_at(write(tmp_path, text.replace("  epochs: 2\n", "  epochs: 2\n  epochs: 3\n")), 5, "duplicate key 'epochs'")


# ---------------------------------------------------------------- targets


LANGUAGE = "name: t\nworkload:\n  model: gpt\n  dataset: python_source\n  epochs: 1\n"  # what follows is line 6


def test_a_perplexity_target_needs_a_language_model_dataset(tmp_path):
    # a classification's evaluation has no perplexity: every trial failed comparing None with the target
    target = "  target: {metric: test_perplexity, value: 5}\n"
    fails_at(write(tmp_path, BLOCK.replace("  target_accuracy: 0.9\n", target)), 5,
             "target: target metric test_perplexity needs a language-model dataset (python_source, tokens",
             "dataset 'mnist' serves classification")
    # a target axis, at its line
    text = BLOCK.replace("  target_accuracy: 0.9\n", "") + \
        "sweep:\n  target:\n    - {metric: test_loss, value: 1}\n    - {metric: test_perplexity, value: 5}\n"
    fails_at(write(tmp_path, text), 6, "target metric test_perplexity needs a language-model dataset")
    assert {t["dataset"] for t in load_sweep(write(tmp_path, LANGUAGE + target)).trials} == {"python_source"}


@pytest.mark.parametrize("value", ["0.5", "0", "-2", ".nan"])
def test_a_perplexity_target_below_1_is_refused(tmp_path, value):
    # a perplexity is exp(loss per token) >= 1: below 1 no trial ever reaches it
    fails_at(write(tmp_path, LANGUAGE + f"  target: {{metric: test_perplexity, value: {value}}}\n"), 6,
             "target value for test_perplexity must be a finite float in [1, inf)")


def test_a_perplexity_target_of_1_and_a_small_loss_target_are_valid(tmp_path):
    for target in ("{metric: test_perplexity, value: 1}", "{metric: test_loss, value: 0.01}"):
        assert load_sweep(write(tmp_path, LANGUAGE + f"  target: {target}\n")).trials
    fails_at(write(tmp_path, LANGUAGE + "  target: {metric: test_loss, value: 0}\n"), 6,
             "target value for test_loss must be a finite float in (0, inf)")


NO_TARGET = "name: t\nworkload:\n  model: mlp\n  epochs: 1\n"  # what follows is line 5


@pytest.mark.parametrize("extra, line, where", [
    ("  target: null\n", 5, "workload.target"),
    ("  target_accuracy: null\n", 5, "workload.target_accuracy"),
    ("  target_accuracy: ~\n", 5, "workload.target_accuracy"),
    ("  target:\n", 5, "workload.target"),
    ("  target_accuracy: 0.9\n  target: null\n", 6, "workload.target"),
    ("sweep:\n  target_accuracy: [0.9, null]\n", 6, "sweep.target_accuracy[1]"),
    ("sweep:\n  target: null\n", 6, "sweep.target"),
    ("  target_accuracy: 0.9\nsweep:\n  compressor:\n    - name: qsgd\n      workload:\n        target_accuracy: null\n",
     10, "sweep.compressor[0].workload.target_accuracy"),
])
def test_an_explicit_null_target_is_refused(tmp_path, extra, line, where):
    # null is the training loop's "no target": a sweep ran every trial without time_to_target_s
    fails_at(write(tmp_path, NO_TARGET + extra), line, f"{where} is null: a sweep needs a target",
             "target: {metric: NAME, value: V} or target_accuracy: V")


# ---------------------------------------------------------------- the hierarchical algorithm's hosts


EMULATED = HEADER + "cluster:\n  emulate: {hosts: 3, workers_per_host: 2, bandwidth: 1gbit}\nsweep:\n"  # line 11


@pytest.mark.parametrize("axes", [
    "  num_workers: [2, 3]\n  algorithm: hierarchical\n  compressor: [fp16]\n",
    "  algorithm: [sra, hierarchical]\n  num_workers: [1, 2, 4, 5]\n  compressor: [qsgd]\n",
    "  compressor:\n    - {name: qsgd, algorithm: hierarchical}\n  num_workers: [3]\n",
])
def test_hierarchical_workers_that_cannot_fill_hosts_alike_are_refused(tmp_path, axes):
    # Ray packs a trial's workers onto hosts of workers_per_host slots: 3 workers on 2-slot hosts are 2 + 1,
    # and every trial failed with "hosts hold different numbers of ranks"
    text = EMULATED + axes
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row.startswith("  num_workers"))
    fails_at(write(tmp_path, text), line, "with algorithm hierarchical", "workers_per_host=2",
             "as many workers on every host", "a multiple of 2 (or at most 2)")


def test_hierarchical_workers_that_fill_hosts_alike_are_valid(tmp_path):
    # one host, or full hosts; other algorithms take any number
    text = EMULATED + "  num_workers: [1, 2, 4, 6]\n  algorithm: hierarchical\n  compressor: [fp16]\n"
    assert {t["num_workers"] for t in load_sweep(write(tmp_path, text)).trials
            if t["algorithm"] == "hierarchical"} == {1, 2, 4, 6}
    text = EMULATED + "  num_workers: [3, 5]\n  algorithm: sra\n  compressor: [qsgd]\n"
    assert {t["num_workers"] for t in load_sweep(write(tmp_path, text)).trials} == {3, 5}
    text = EMULATED.replace("workers_per_host: 2", "workers_per_host: 4") + \
        "  num_workers: [3]\n  algorithm: hierarchical\n  compressor: [fp16]\n"
    assert load_sweep(write(tmp_path, text)).trials


# ---------------------------------------------------------------- packages and imports


def test_image_folder_without_torchvision_is_refused_at_the_dataset(tmp_path, monkeypatch):
    import sys

    import workloads.image_folder

    text = BLOCK + "  dataset: image_folder\n  data_dir: .\n"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "torchvision", None)  # `import torchvision` fails as if not installed
    fails_at(write(tmp_path, text), 6, 'dataset: dataset image_folder needs torchvision: pip install "lowprec[vision]"')
    monkeypatch.setattr(workloads.image_folder, "import_torchvision", lambda owner: object())  # installed
    assert {t["dataset"] for t in load_sweep(write(tmp_path, text)).trials} == {"image_folder"}


@pytest.mark.parametrize("body, words", [
    ("import os\nos._exit(0)\n", "it called os._exit(0) while being imported"),
    ("import sys\nsys.exit(0)\n", "it called sys.exit(0) while being imported"),
    ("import os\ntry:\n    os._exit(3)\nexcept Exception:\n    pass\n", "it called os._exit(3) while being imported"),
])
def test_an_import_that_exits_is_refused(tmp_path, monkeypatch, body, words):
    import os

    class Exited(BaseException):
        pass

    def exit_for_test(status):  # had the guard failed, this test would have ended pytest
        raise Exited(status)

    monkeypatch.setattr(os, "_exit", exit_for_test)
    (tmp_path / "quits.py").write_text(body)
    fails_at(write(tmp_path, "name: t\nimports: [quits.py]\nworkload: {target_accuracy: 0.9}\n"), 2,
             f"setting imports: cannot import {tmp_path / 'quits.py'}: {words}")
    assert os._exit is exit_for_test  # put back


def test_validate_exits_2_for_an_import_that_exits(tmp_path):
    # os._exit cannot be caught: `lowprec validate` exited 0, having checked nothing
    from tests.helpers import run_mains

    cases = {}
    for name, body in (("os_exit", "import os\nos._exit(0)\n"), ("sys_exit", "import sys\nsys.exit(0)\n")):
        (tmp_path / f"{name}.py").write_text(body)
        path = write(tmp_path, f"name: t\nimports: [{name}.py]\nworkload: {{target_accuracy: 0.9}}\n", f"{name}.yaml")
        cases[name] = ["validate", str(path)]
    done = run_mains("orchestrator", cases)
    for name, call in (("os_exit", "os._exit(0)"), ("sys_exit", "sys.exit(0)")):
        assert done[name]["returncode"] == 2, done[name]
        assert done[name]["stderr"] == (f"error: {tmp_path / name}.yaml:2: setting imports: cannot import "
                                        f"{tmp_path / name}.py: it called {call} while being imported\n")


# ---------------------------------------------------------------- data_dir where it is written


@pytest.mark.parametrize("extra, line", [
    ("  data_dir: no_such_folder\n", 6),
    ("sweep:\n  data_dir: [data, no_such_folder]\n", 7),
    ("sweep:\n  compressor:\n    - fp32\n    - name: qsgd\n      bits: 4\n      workload:\n        lr: 0.1\n"
     "        data_dir: no_such_folder\n", 13),
])
def test_a_missing_data_dir_is_reported_where_it_is_written(tmp_path, monkeypatch, extra, line):
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    fails_at(write(tmp_path, BLOCK + extra), line, "data_dir 'no_such_folder' is not a folder here")


def test_a_data_dir_problem_is_reported_at_a_line_of_the_file(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    # set for one entry only: the baselines, which the file does not write, run without it
    text = BLOCK + "  dataset: cifar10\nsweep:\n  compressor:\n    - name: qsgd\n      workload:\n        data_dir: data\n"
    fails_at(write(tmp_path, text), 11, "baselines: data_dir: dataset 'cifar10' needs data_dir",
             "data_dir is set only in sweep.compressor[0].workload")
    # set nowhere: where the workload would set it, with or without the baselines
    for top in ("", "baselines: false\n"):
        fails_at(write(tmp_path, top + BLOCK + "  dataset: cifar10\n"), 2 + bool(top),
                 "data_dir: dataset 'cifar10' needs data_dir")
    # an entry's own data_dir its dataset does not read: at that data_dir
    text = BLOCK + "  dataset: synthetic\nsweep:\n  compressor:\n    - name: qsgd\n      workload:\n        data_dir: data\n"
    fails_at(write(tmp_path, text), 11, "sweep.compressor[0].workload.data_dir: dataset 'synthetic' reads no files")
