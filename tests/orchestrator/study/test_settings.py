"""orchestrator.study.settings: the one schema of the settings (the tables in docs/sweeps.md, docs, defaults, checks).
The training loop's command line, which validates through it: test_train_loop.py."""

from __future__ import annotations

import math
import re

import pytest

import compressors
from compressors.comm.topology import Topology
from orchestrator.study import ddp_setup, settings, train_loop
from tests.helpers import ROOT


def test_documented_settings_tables_equal_the_schema():
    text = (ROOT / "docs" / "sweeps.md").read_text()
    block = re.search(r"<!-- settings:start -->\n(.*?)<!-- settings:end -->", text, re.S)
    assert block, "docs/sweeps.md lacks the settings block"
    assert block.group(1) == settings.markdown(), "docs/sweeps.md is stale: paste `python -m orchestrator.study.settings`"


def test_every_setting_is_declared_once_with_a_doc():
    names = [p.name for p in (*settings.SWEEP, *settings.CLUSTER, *settings.AXES, *settings.WORKLOAD)]
    assert len(names) == len(set(names))
    for name in names:
        assert settings.param(name).doc, name
    for name in compressors.NAMES:
        for p in compressors.params_of(name):
            assert p.doc, (name, p.name)


def test_compressor_parameters_never_share_a_name_with_a_setting():
    # they are columns of trials.csv beside the settings; a parameter named lr would shadow the optimizer's
    setting_names = {p.name for p in (*settings.SWEEP, *settings.CLUSTER, *settings.AXES, *settings.WORKLOAD)}
    assert not set(settings.compressor_param_names()) & setting_names


@pytest.mark.parametrize("given, words", [
    ({"epochs": "abc"}, ["epochs", "[1, 100000]"]),
    ({"lr": math.nan}, ["lr", "(0, 1e+37]"]),
    ({"lr": math.inf}, ["lr", "(0, 1e+37]"]),
    ({"dataset": "synthetic", "input_shape": [1, 11, 28], "model": "lenet5"},
     ["setting input_shape: model 'lenet5' needs images of at least 12x12 pixels, got input_shape [1, 11, 28]"]),
    ({"dataset": "synthetic", "input_shape": [20], "model": "alexnet"}, ["input_shape", "[channels, height, width]"]),
    ({"momentum": 0.9, "optimizer": "adam"}, ["momentum", "adam takes no momentum"]),
    ({"compressor": "dgc", "optimizer": "adam"}, ["optimizer", "dgc keeps sgd's momentum in its memory"]),
    ({"compressor": "dgc", "weight_decay": 1e-4}, ["weight_decay", "the optimizer's weight decay would bypass"]),
    ({"model": "lenet5", "width": 8}, ["width", "lenet5"]),
    ({"dataset": "synthetic", "data_dir": "x"}, ["data_dir", "reads no files"]),
    ({"warmup_epochs": 2, "epochs": 2}, ["warmup_epochs", "< epochs"]),
    ({"compressor": "qsgd", "compressor_params": {"bits": 9}}, ["bits", "[2, 8]"]),
    ({"compressor": "qsgd", "compressor_params": {"lr": 0.1}}, ["unknown parameter 'lr'"]),
    ({"compressor": "onebit", "algorithm": "allreduce"}, ["algorithm", "sra"]),
    ({"num_workers": 4}, ["unknown training setting", "num_workers"]),
    ({"cpus_per_worker": 7}, ["unknown training setting", "cpus_per_worker"]),
    ({"target": {"metric": "test_perplexity", "value": 5}},
     ["setting target: target metric test_perplexity needs a language-model dataset", "'mnist' serves classification"]),
    ({"model": "gpt", "dataset": "python_source", "target": {"metric": "test_perplexity", "value": 0.99}},
     ["setting target: target value for test_perplexity must be a finite float in [1, inf), got 0.99"]),
])
def test_check_training_names_the_bad_setting(given, words):
    with pytest.raises(ValueError) as caught:
        settings.check_training(given)
    for word in words:
        assert word in str(caught.value), str(caught.value)


def test_sgd_takes_the_momentum_it_is_given():
    import torch

    params = [torch.nn.Parameter(torch.zeros(2))]
    assert ddp_setup.optimizer(settings.check_training({"momentum": 0.5}), params).defaults["momentum"] == 0.5
    assert ddp_setup.optimizer(settings.check_training({}), params).defaults["momentum"] == 0.9
    assert ddp_setup.optimizer(settings.check_training({"momentum": 0.0}), params).defaults["momentum"] == 0.0


def test_dgc_keeps_the_trials_momentum_in_its_memory_and_sgd_runs_without():
    import torch

    params = [torch.nn.Parameter(torch.zeros(2))]
    for given, momentum in (({}, 0.9), ({"momentum": 0.5}, 0.5)):
        config = settings.check_training({"compressor": "dgc", **given})
        assert ddp_setup.optimizer(config, params).defaults["momentum"] == 0.0
        hook = ddp_setup.comm_hook(config, "dgc", None, config["compressor_params"], Topology.flat(1))
        assert hook.reducer.ef.momentum == momentum
    fp32 = settings.check_training({"momentum": 0.5})
    assert ddp_setup.comm_hook(fp32, "qsgd", None, {}, Topology.flat(1)).reducer.ef is None


def test_check_training_fills_defaults_and_the_compressor_parameters():
    config = settings.check_training({"compressor": "qsgd", "compressor_params": {"bits": 2}, "lr": 1})
    assert config["lr"] == 1.0 and isinstance(config["lr"], float)
    assert config["compressor_params"] == {"bits": 2, "bucket": 512, "norm": "max"}
    assert set(config) == set(settings.TRAINING_KEYS)


# ---------------------------------------------------------------- a target the dataset's task has no value of

CLASSIFIER_FILE = """\
import torch

import workloads


def blobs(data_dir, seed):
    x, y = torch.randn(32, 4), torch.randint(0, 2, (32,))
    return workloads.DatasetPair(train=workloads.Split(x, y), test=workloads.Split(x, y), input_shape=(4,),
                                 num_classes=2)
"""
PERPLEXITY = {"metric": "test_perplexity", "value": 5}


def test_a_perplexity_target_on_a_factorys_classification_is_refused_at_the_start(tmp_path, monkeypatch):
    # a factory's task is known once it is built: the training loop says so before any step (it raised
    # TypeError comparing the classification's None perplexity with the target)
    (tmp_path / "data.py").write_text(CLASSIFIER_FILE)
    steps = []
    monkeypatch.setattr(train_loop, "_batches", lambda *args: steps.append(1) or iter(()))
    config = {"dataset": f"{tmp_path / 'data.py'}:blobs", "model": "mlp", "width": 8, "depth": 1,
              "target": PERPLEXITY}
    assert settings.check_training(config)["target"] == PERPLEXITY  # unknown before it is built
    with pytest.raises(train_loop.SettingError, match=r"^setting target: target metric test_perplexity needs a "
                                                      r"language-model dataset .*serves classification"):
        train_loop.train(config)
    assert not steps


@pytest.mark.parametrize("dataset", ["mnist", "FACTORY"])
def test_the_training_cli_exits_2_for_a_perplexity_target_on_a_classification(tmp_path, monkeypatch, dataset):
    from tests.mains import run_main

    (tmp_path / "data.py").write_text(CLASSIFIER_FILE)
    monkeypatch.chdir(ROOT)
    dataset = f"{tmp_path / 'data.py'}:blobs" if dataset == "FACTORY" else dataset
    done = run_main("orchestrator.study.train_loop",
                    ["--dataset", dataset, "--target", "{metric: test_perplexity, value: 5}", "--epochs", "1",
                     "--max_steps_per_epoch", "2", "--eval_samples", "64"])
    assert done["returncode"] == 2, done["stderr"]
    assert "Traceback" not in done["stderr"]
    errors = [line for line in done["stderr"].splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].endswith("serves classification: use test_accuracy or test_loss"), \
        done["stderr"]
    assert "setting target: target metric test_perplexity needs a language-model dataset" in errors[0]
