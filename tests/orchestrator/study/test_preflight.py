"""The preflight (orchestrator/study/preflight.py): a mistake in the user's model or data, or options a model
refuses, exit 2 at `validate` and `run` in one line naming the sweep file's line, the user's error and the
user's own file and line, before any Ray process starts; a sound workload passes; the check is bounded in
time and memory and can be turned off."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.cli import main

MODELS = textwrap.dedent('''\
    import math
    import time

    import torch
    from torch import nn


    def good(input_shape, num_classes, hidden=8):
        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),
                             nn.Linear(hidden, num_classes))


    def picky(input_shape, num_classes, hidden=8):
        if hidden & (hidden - 1):
            raise ValueError(f"hidden must be a power of two, got {hidden}")
        return good(input_shape, num_classes, hidden)


    class Flat(nn.Module):
        def __init__(self, num_classes):
            super().__init__()
            self.fc = nn.Linear(2, num_classes)

        def forward(self, x):
            return self.fc(x.reshape(-1, 2))


    def wrong_shape(input_shape, num_classes):
        return Flat(num_classes)


    def extra_classes(input_shape, num_classes):
        return good(input_shape, num_classes + 3)


    def a_string(input_shape, num_classes):
        return "a model"


    class Unused(nn.Module):
        def __init__(self, input_shape, num_classes):
            super().__init__()
            self.used = good(input_shape, num_classes)
            self.spare = nn.Linear(2, 2)

        def forward(self, x):
            return self.used(x)


    def unused(input_shape, num_classes):
        return Unused(input_shape, num_classes)


    def slow(input_shape, num_classes):
        time.sleep(3600)  # the preflight's thread is left here: it never reaches a later test
        return good(input_shape, num_classes)
''')

DATA = textwrap.dedent('''\
    import torch
    from torch.utils.data import TensorDataset

    import workloads


    def blobs(data_dir, seed, train=32, test=16, classes=2, label_shift=0):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(train + test, 4, generator=g)
        y = torch.randint(0, classes, (train + test,), generator=g) + label_shift
        return workloads.DatasetPair(train=TensorDataset(x[:train], y[:train]),
                                     test=TensorDataset(x[train:], y[train:]), input_shape=(4,), num_classes=classes)


    def raising(data_dir, seed):
        raise FileNotFoundError("no shards under /data/blobs")
''')


@pytest.fixture
def study(tmp_path: Path):
    """Writes the user's files and a sweep naming them; returns the sweep file's path."""
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "data.py").write_text(DATA)

    def write(workload: str, top: str = "") -> Path:
        path = tmp_path / "study.yaml"
        path.write_text(f"name: s\n{top}workload:\n" + textwrap.indent(textwrap.dedent(workload), "  ")
                        + "  epochs: 1\n  batch_size: 8\n  target_accuracy: 0.5\n")
        return path
    return write


def _refused(capsys, path: Path) -> str:
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err


USER = "model: models.py:{}\ndataset: data.py:blobs\n"


def test_a_factory_that_raises_is_reported_at_its_line_in_the_users_words_and_place(study, capsys):
    path = study(USER.format("picky") + "model_options: {hidden: 6}\n")
    err = _refused(capsys, path)
    assert f"{path}:5: model_options: ValueError: hidden must be a power of two, got 6 (at " in err
    assert f"models.py:15, in picky)" in err


@pytest.mark.parametrize("factory, message", [
    ("wrong_shape", "on a training batch of targets [8] the model returned logits of shape [16, 2], not [8, 2]"),
    ("extra_classes", "the model returned logits of shape [8, 5], not [8, 2]"),
    ("a_string", "models.py:a_string returned a str, not a torch.nn.Module"),
    ("unused", "1 parameter(s) got no gradient from the loss (spare.weight, spare.bias"),
])
def test_a_model_that_does_not_fit_the_task_is_refused_before_any_trial(study, capsys, factory, message):
    err = _refused(capsys, study(USER.format(factory)))
    assert ":3: model: " in err and message.replace("1 parameter", "2 parameter") in err.replace("1 parameter",
                                                                                                  "2 parameter")


@pytest.mark.parametrize("dataset, message", [
    ("data.py:raising", ":4: dataset: FileNotFoundError: no shards under /data/blobs (at "),
    ("data.py:blobs\ndataset_options: {train: 0}", ":5: dataset_options: the training split has no samples"),
    ("data.py:blobs\ndataset_options: {test: 0}", ":5: dataset_options: the test split has no samples"),
    ("data.py:blobs\ndataset_options: {label_shift: 1}",
     ":5: dataset_options: the training split's first batch holds the target 2, outside [0, 1]"),
])
def test_data_that_cannot_train_is_refused_at_the_datasets_line(study, capsys, dataset, message):
    err = _refused(capsys, study(f"model: models.py:good\ndataset: {dataset}\n"))
    assert message in err


@pytest.mark.parametrize("options, message", [
    ("n_head: 3", "n_embd 64 must be divisible by n_head 3"),
    ("block_size: 8", "block_size 8 is shorter than the sequence length 16"),
    ("dropout: 1", "dropout must lie in [0, 1), got 1"),
])
def test_options_a_built_in_model_refuses_are_found_by_validate(study, capsys, options, message):
    err = _refused(capsys, study(f"model: gpt\ndataset: python_source\nseq_len: 16\n{options}\n"))
    assert ":3: model: model 'gpt': " + message in err


def test_a_sound_workload_passes_and_the_preflight_can_be_turned_off(study, capsys):
    assert main(["validate", str(study(USER.format("good")))]) == 0
    assert main(["validate", str(study(USER.format("extra_classes"), top="preflight: false\n"))]) == 0


def test_a_factory_that_does_not_return_is_bounded_by_the_startup_limit(study, capsys):
    err = _refused(capsys, study(USER.format("slow"), top="cluster: {startup_timeout_s: 0.2}\n"))
    assert "did not build and take a step within startup_timeout_s = 0.2 s" in err


def test_a_model_too_large_for_this_machine_is_checked_on_the_meta_device(study, monkeypatch):
    from orchestrator.study import preflight
    from orchestrator.study.sweep_file import load_sweep

    seen = []
    real = preflight._step
    monkeypatch.setattr(preflight.env_info, "mem_available_bytes", lambda: 1)
    monkeypatch.setattr(preflight, "_step", lambda model, batches, data, device: (seen.append(device),
                                                                                 real(model, batches, data, device)))
    assert preflight.check_sweep(load_sweep(study(USER.format("good")))) == 1
    with pytest.raises(Exception, match=r"logits of shape \[8, 5\]"):  # shapes are still checked there
        preflight.check_sweep(load_sweep(study(USER.format("extra_classes"))))
    assert seen == ["meta", "meta"]


def test_each_distinct_workload_is_checked_once(study):
    from orchestrator.study import preflight
    from orchestrator.study.sweep_file import load_sweep

    path = study(USER.format("good"))
    path.write_text(path.read_text().replace("  batch_size: 8\n", "") + "sweep:\n  seed: [0, 1]\n  lr: [0.1, 0.2]\n"
                    "  batch_size: [8, 4]\n")
    sweep = load_sweep(path)
    assert len(sweep.trials) == 2 * 2 * 2 * 2  # fp32 and fp16 too
    assert preflight.check_sweep(sweep) == 2  # the batch size feeds the model; seed and lr do not


def test_a_perplexity_target_on_a_factorys_classification_is_refused_once_it_is_built(study, capsys):
    path = study(USER.format("good"))
    path.write_text(path.read_text().replace("  target_accuracy: 0.5\n", "  target: {metric: test_perplexity, value: 2}\n"))
    err = _refused(capsys, path)
    assert ":7: target: target metric test_perplexity needs a language-model dataset" in err
