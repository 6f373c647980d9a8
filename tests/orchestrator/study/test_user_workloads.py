"""The user's own model, dataset and compressor by import reference; targets on any metric; streamed data."""
from __future__ import annotations

import hashlib
import math
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

import compressors
import workloads
from orchestrator.study import settings, train_loop
from orchestrator.study.sweep_file import SweepFileError, load_sweep

# The user's files: a model file and a compressor module outside the package (also what the job of
# tests/orchestrator/test_job_submit.py runs).
DATA = Path(__file__).resolve().parent.parent / "data"
MODEL_FILE = (DATA / "my_models.py").read_text()
COMPRESSOR_FILE = (DATA / "my_compressor.py").read_text()


@pytest.fixture
def user_code(tmp_path: Path) -> Path:
    """A folder outside the checkout with the user's model file and compressor module."""
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "my_models.py").write_text(MODEL_FILE)
    (folder / "my_compressor.py").write_text(COMPRESSOR_FILE)
    (folder / "broken.py").write_text("raise RuntimeError('the user\\'s module fails on import')\n")
    return folder


@pytest.fixture
def forget_registrations():
    """Registrations and imports of the user's modules stay in this test: other tests see the built-ins."""
    from compressors.core import registry
    from workloads import references

    before = dict(registry.COMPRESSORS), dict(registry._BY_WIRE_ID), dict(references._FILES)
    yield
    for now, then in zip((registry.COMPRESSORS, registry._BY_WIRE_ID, references._FILES), before):
        now.clear()
        now.update(then)


def _sweep(folder: Path, body: str) -> Path:
    path = folder / "study.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def _error(path: Path) -> SweepFileError:
    with pytest.raises(SweepFileError) as caught:
        load_sweep(path)
    return caught.value


SMALL = {"dataset": "synthetic", "input_shape": [1, 4, 4], "num_samples": 64, "test_samples": 32, "batch_size": 16,
         "epochs": 1, "lr": 0.05}


def test_a_model_file_beside_the_sweep_is_found_from_another_working_directory(user_code, tmp_path, monkeypatch):
    path = _sweep(user_code, """
        name: mine
        workload: {model: my_models.py:tiny_mlp, model_options: {hidden: 8}, dataset: synthetic,
                   target_accuracy: 0.5}
    """)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    trials = load_sweep(path).trials
    assert {t["model"] for t in trials} == {f"{user_code / 'my_models.py'}:tiny_mlp"}
    assert trials[0]["model_options"] == {"hidden": 8}


@pytest.mark.parametrize("model, options, expected", [
    ("nowhere.py:tiny_mlp", None, "no file"),
    ("my_models.py:missing", None, "has no 'missing'; it defines not_a_model, tiny_mlp"),
    ("my_models.py:tiny_mlp", {"width": 3}, "got an unexpected keyword argument 'width'; it takes hidden"),
    ("broken.py:f", None, "cannot import"),
    ("no_such_package.models:f", None, "no module named 'no_such_package'"),
    ("my_models.py:", None, "is not MODULE:FACTORY"),
])
def test_bad_references_are_refused_at_their_line_before_ray(user_code, model, options, expected):
    extra = f"\n          model_options: {options}" if options else ""
    path = _sweep(user_code, f"""
        name: mine
        workload:
          dataset: synthetic
          target_accuracy: 0.5
          model: "{model}"{extra}
    """)
    error = _error(path)
    assert error.line == (7 if options else 6) and expected in str(error), str(error)
    if model.startswith("broken"):
        assert "RuntimeError: the user's module fails on import" in str(error)


def test_a_builtin_model_takes_no_model_options_and_a_reference_no_builtin_keys(user_code):
    error = _error(_sweep(user_code, """
        name: mine
        workload: {model: mlp, model_options: {width: 3}, target_accuracy: 0.5}
    """))
    assert "model_options" in str(error) and "width" in str(error)
    error = _error(_sweep(user_code, """
        name: mine
        workload: {model: my_models.py:tiny_mlp, width: 3, target_accuracy: 0.5}
    """))
    assert "takes its options in model_options, not as the workload key 'width'" in str(error)


def test_a_failing_import_is_refused_at_its_line(user_code, forget_registrations):
    error = _error(_sweep(user_code, """
        name: mine
        imports: [broken.py]
        workload: {target_accuracy: 0.5}
    """))
    assert error.line == 3 and "cannot import" in str(error) and "RuntimeError" in str(error)


def test_a_compressor_from_imports_can_be_swept_and_trains(user_code, forget_registrations):
    path = _sweep(user_code, """
        name: mine
        imports: [my_compressor.py]
        workload: {dataset: synthetic, target_accuracy: 0.5}
        sweep: {compressor: [truncate16]}
    """)
    trials = load_sweep(path).trials
    assert "truncate16" in compressors.names()
    mine = [t for t in trials if t["compressor"] == "truncate16"]
    assert len(mine) == 1 and mine[0]["imports"] == [str(user_code / "my_compressor.py")]
    config = {**SMALL, "imports": mine[0]["imports"], "model": "mlp", "width": 8, "depth": 1, "min_compress_numel": 0}
    result = train_loop.train({**config, "compressor": "truncate16"})
    plain = train_loop.train({**config, "compressor": "fp32"})
    assert result["status"] == "ok"
    # The hook encoded and decoded every step, and the truncated gradients trained another model.
    assert result["final"]["encode_s"] > 0 and result["final"]["decode_s"] > 0
    assert result["final"]["test_loss"] != plain["final"]["test_loss"]
    (source,) = result["sources"]
    assert source["sha256"] == hashlib.sha256(COMPRESSOR_FILE.encode()).hexdigest()


def test_a_referenced_model_trains_and_its_source_is_recorded(user_code):
    reference = f"{user_code / 'my_models.py'}:tiny_mlp"
    result = train_loop.train({**SMALL, "model": reference, "model_options": {"hidden": 8}})
    assert result["status"] == "ok"
    assert result["model_summary"]["parameters"] == 16 * 8 + 8 + 8 * 10 + 10
    assert result["sources"] == [{"reference": reference, "file": str(user_code / "my_models.py"),
                                  "sha256": hashlib.sha256(MODEL_FILE.encode()).hexdigest()}]


def test_a_factory_must_return_a_module(user_code):
    with pytest.raises(ValueError, match="returned a str, not a torch.nn.Module"):
        train_loop.train({**SMALL, "model": f"{user_code / 'my_models.py'}:not_a_model"})


def test_a_target_on_test_loss_gives_time_to_target():
    config = {**SMALL, "model": "mlp", "width": 16, "depth": 1, "epochs": 3}
    first = train_loop.train(config)["history"]
    losses = [epoch["test_loss"] for epoch in first]
    # A loss the run passes below in its second epoch, never in its first.
    goal = (losses[0] + min(losses[1:])) / 2
    result = train_loop.train({**config, "target": {"metric": "test_loss", "value": goal}})
    final = result["final"]
    assert final["time_to_target_s"] is not None and final["steps_to_target"] is not None
    assert 0 < final["time_to_target_s"] <= final["train_time_s"]
    assert final["steps_to_target"] > 4  # 4 steps an epoch: after the first epoch


@pytest.mark.parametrize("target, message", [
    ({"metric": "test_loss"}, "target must be {metric: NAME, value: V}"),
    ({"metric": "train_speed", "value": 1}, "target metric must be one of test_accuracy, test_loss, "
                                              "test_perplexity"),
    ({"metric": "test_accuracy", "value": 1.5}, "target value for test_accuracy must be"),
    ({"metric": "test_loss", "value": math.nan}, "target value for test_loss must be"),
])
def test_bad_targets_are_refused(target, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        settings.check_training({"target": target})


def test_target_and_its_shorthand_are_not_both_given():
    with pytest.raises(ValueError, match="not both"):
        settings.check_training({"target": {"metric": "test_loss", "value": 1.0}, "target_accuracy": 0.5})
    assert settings.target_of({"target_accuracy": 0.5, "target": None}) == ("test_accuracy", 0.5)


class _Numbered(Dataset):
    """Sample i is (i, 0): which samples a rank read shows in x."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tensor([float(i)]), torch.tensor(0)


@pytest.mark.parametrize("count, world", [(20, 2), (21, 4), (7, 3)])
def test_streamed_shards_are_disjoint_cover_the_data_and_match_the_in_memory_order(count, world):
    config = {"batch_size": 3, "seed": 5, "loader_workers": 0}
    steps = math.ceil(math.ceil(count / world) / config["batch_size"])
    streamed, in_memory = [], []
    split = workloads.Split(x=torch.arange(count, dtype=torch.float32)[:, None], y=torch.zeros(count, dtype=torch.int64))
    for rank in range(world):
        mine = [int(v) for x, _ in train_loop._batches(_Numbered(count), rank, world, 2, config, steps,
                                                        torch.device("cpu")) for v in x[:, 0]]
        streamed.append(mine)
        in_memory.append([int(v) for x, _ in train_loop._batches(split, rank, world, 2, config, steps,
                                                                 torch.device("cpu")) for v in x[:, 0]])
    assert streamed == in_memory
    every = [i for shard in streamed for i in shard]
    assert sorted(set(every)) == list(range(count))
    assert len(every) == math.ceil(count / world) * world  # each rank as many; the padding repeats a few
    assert len(every) - len(set(every)) == len(every) - count
    # Another epoch, another order.
    other = [int(v) for x, _ in train_loop._batches(_Numbered(count), 0, world, 3, config, steps,
                                                     torch.device("cpu")) for v in x[:, 0]]
    assert other != streamed[0] or count <= world


def test_a_file_missing_on_this_node_is_imported_by_the_name_ray_ships_it_under(tmp_path, monkeypatch):
    from workloads import references

    on_the_driver = str(tmp_path / "on_the_driver" / "remote_models.py")
    shipped = tmp_path / "shipped"  # where Ray's py_modules unpacks a .py file on another node
    shipped.mkdir()
    (shipped / f"{references.module_name(on_the_driver)}.py").write_text(MODEL_FILE)
    monkeypatch.syspath_prepend(str(shipped))
    fn = references.factory(f"{on_the_driver}:tiny_mlp")
    assert fn.__module__ == references.module_name(on_the_driver)
    with pytest.raises(references.ReferenceProblem, match="no file"):
        references.factory(f"{tmp_path / 'on_the_driver' / 'absent_everywhere.py'}:tiny_mlp")


def test_what_ray_ships_is_the_users_files_under_names_of_their_own_and_uninstalled_packages(
        tmp_path, monkeypatch, user_code):
    from workloads import references

    package = tmp_path / "lab" / "labmodels"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(MODEL_FILE)
    monkeypatch.syspath_prepend(str(tmp_path / "lab"))
    stage = tmp_path / "stage"
    model_file = str(user_code / "my_models.py")
    shipped = references.shipped([f"{model_file}:tiny_mlp", "labmodels.nets:tiny_mlp",
                                  "labmodels.nets:tiny_mlp", "json", "workloads.gpt:build_gpt"], stage)
    # The installed (json) and this project's own (workloads) stay where every node has them; a file goes
    # as a copy named as it is imported, which shadows no other module.
    copy = stage / f"{references.module_name(model_file)}.py"
    assert shipped == [str(copy), str(package)]
    assert copy.read_text() == MODEL_FILE


@pytest.mark.parametrize("stem", ["workloads", "tokenize", "json"])
def test_a_users_file_named_like_another_module_shadows_nothing_and_writes_no_bytecode(
        tmp_path, stem, forget_registrations):
    from workloads import references

    first, second = tmp_path / "a" / f"{stem}.py", tmp_path / "b" / f"{stem}.py"
    for path, hidden in ((first, 8), (second, 4)):
        path.parent.mkdir()
        path.write_text(MODEL_FILE.replace("hidden=16", f"hidden={hidden}"))
    one = references.factory(f"{first}:tiny_mlp")((1, 2, 2), 3)
    two = references.factory(f"{second}:tiny_mlp")((1, 2, 2), 3)
    assert (one[1].out_features, two[1].out_features) == (8, 4)  # each file its own module
    assert sys.modules[stem].__name__ == stem and not hasattr(sys.modules[stem], "tiny_mlp")
    assert not (first.parent / "__pycache__").exists() and not (second.parent / "__pycache__").exists()


STREAMED_FILE = textwrap.dedent('''
    import torch
    from torch.utils.data import TensorDataset

    import workloads


    def blobs(data_dir, seed, *, count=96):
        g = torch.Generator().manual_seed(seed)
        y = torch.randint(0, 2, (count,), generator=g)
        x = torch.randn(count, 4, generator=g) + 3.0 * y[:, None].float()
        cut = count * 3 // 4
        return workloads.DatasetPair(train=TensorDataset(x[:cut], y[:cut]), test=TensorDataset(x[cut:], y[cut:]),
                                     input_shape=(4,), num_classes=2)
''')


def test_a_streamed_dataset_of_the_users_trains_through_dataloader_workers(user_code):
    (user_code / "my_data.py").write_text(STREAMED_FILE)
    result = train_loop.train({"dataset": f"{user_code / 'my_data.py'}:blobs", "dataset_options": {"count": 96},
                               "model": "mlp", "width": 8, "depth": 1, "batch_size": 8, "epochs": 2,
                               "loader_workers": 1, "eval_samples": 16, "target_accuracy": 0.75})
    assert result["status"] == "ok", result["reason"]
    # Two blobs three standard deviations apart: separable, and the 16 evaluated samples say so.
    assert result["final"]["test_accuracy"] >= 0.75 and result["final"]["steps_to_target"] is not None
    assert result["final"]["test_accuracy"] * 16 == int(result["final"]["test_accuracy"] * 16)
    assert result["final"]["test_perplexity"] is None  # a classifier's


def test_a_package_beside_the_sweep_is_found_from_any_working_folder(tmp_path, monkeypatch, forget_registrations):
    from orchestrator.study.runner import _shipped

    package = tmp_path / "study" / "mylab"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(MODEL_FILE)
    path = _sweep(tmp_path / "study", """\
        name: beside
        workload: {model: mylab.models:tiny_mlp, model_options: {hidden: 4}, dataset: synthetic,
                   input_shape: [1, 4, 4], num_samples: 64, test_samples: 32, target_accuracy: 0.5}
        """)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(elsewhere))])
    monkeypatch.delitem(sys.modules, "mylab", raising=False)
    monkeypatch.delitem(sys.modules, "mylab.models", raising=False)
    sweep = load_sweep(path)
    assert sweep.trials[0]["model"] == "mylab.models:tiny_mlp"
    assert _shipped(sweep, tmp_path / "stage") == [str(package)]  # every Ray node gets it
