"""The sync settings (orchestrator/study/settings.py, sweep_file.py, labels.py, results tables): a grid
crosses them with every sync as an algorithm with every compressor, each trial keeps those its sync takes
(defaults filled), a setting no trial takes is refused at its line, labels show a sync where it is not
every_step, and a periodic sync's trials are compared with the every-step baselines."""
from __future__ import annotations

import textwrap

import pandas as pd
import pytest

from orchestrator.results import tables
from orchestrator.study import settings
from orchestrator.study.sweep_file import SweepFileError, load_sweep
from orchestrator.study.train_loop import SettingError, train
from tests.helpers import SWEEP_HEADER as HEADER
from tests.helpers import write


def _load(tmp_path, extra: str):
    return load_sweep(write(tmp_path, HEADER + textwrap.dedent(extra)))


def test_a_grid_of_syncs_keeps_each_trials_own_settings_and_names_them(tmp_path):
    sweep = _load(tmp_path, """\
        baselines: false
        sweep:
          sync: [every_step, local_sgd, diloco]
          inner_steps: [10, 50]
          compressor: [fp32, {name: mx, element: e2m1}]
        """)
    by_sync = {}
    for t in sweep.trials:
        by_sync.setdefault(t["sync"], []).append(t)
    # every_step ignores inner_steps: one trial per compressor, its sync settings null
    assert len(by_sync["every_step"]) == 2 and len(by_sync["local_sgd"]) == 4 and len(by_sync["diloco"]) == 4
    assert all(t[k] is None for t in by_sync["every_step"] for k in settings.ALL_SYNC_KEYS)
    assert all((t["outer_lr"], t["outer_momentum"], t["fragments"]) == (None, None, None) for t in by_sync["local_sgd"])
    assert {(t["outer_lr"], t["outer_momentum"], t["fragments"], t["overlap_steps"]) for t in by_sync["diloco"]} == {
        (0.7, 0.9, 1, 0)}
    names = {t["name"] for t in sweep.trials}
    assert {"fp32 num_workers=1 seed=0", "fp32 sync=local_sgd inner_steps=10 num_workers=1 seed=0",
            "mx element=e2m1 sync=diloco inner_steps=50 num_workers=1 seed=0"} <= names, names


def test_a_streaming_entry_shows_what_differs_from_diloco_defaults(tmp_path):
    sweep = _load(tmp_path, """\
        baselines: false
        sweep:
          compressor:
            - {name: fp16, workload: {sync: diloco, inner_steps: 8}}
            - {name: fp16, workload: {sync: diloco, inner_steps: 8, fragments: 4, overlap_steps: 1}}
        """)
    assert sorted(t["name"] for t in sweep.trials) == [
        "fp16 sync=diloco inner_steps=8 fragments=1 overlap_steps=0 num_workers=1 seed=0",
        "fp16 sync=diloco inner_steps=8 fragments=4 overlap_steps=1 num_workers=1 seed=0"]


@pytest.mark.parametrize("extra,line,words", [
    ("  inner_steps: 10\n", 3, ["inner_steps is set but no trial's sync takes it", "set sync: diloco"]),
    ("  sync: local_sgd\n", 2, ["sync local_sgd needs inner_steps"]),  # at the workload: it is not written
    ("  sync: local_sgd\n  inner_steps: 4\n  outer_lr: 0.5\n", 5, ["outer_lr is set but no trial's sync"]),
    ("  sync: diloco\n  inner_steps: 3\n  fragments: 4\n", 5, ["fragments=4 must be at most inner_steps=3"]),
    ("  sync: diloco\n  inner_steps: 8\n  fragments: 2\n  overlap_steps: 4\n", 6,
     ["overlap_steps=4 must be below floor(inner_steps / fragments) = 4"]),
])
def test_a_sync_setting_that_cannot_apply_is_refused_at_its_line(tmp_path, extra, line, words):
    path = write(tmp_path, HEADER.replace("workload:\n", "workload:\n" + extra, 1))
    with pytest.raises(SweepFileError) as caught:
        load_sweep(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ") and all(w in message for w in words), message


@pytest.mark.parametrize("compressor,words", [("powersgd", "runs as DDP's own communication hook"),
                                              ("dgc", "keeps sgd's momentum of every step")])
def test_methods_of_ddps_hook_alone_are_refused_with_a_periodic_sync(compressor, words):
    with pytest.raises(ValueError, match=words):
        settings.check_training({"compressor": compressor, "sync": "diloco", "inner_steps": 4})


def test_the_training_loop_fills_the_defaults_of_what_its_sync_takes():
    config = settings.check_training({"sync": "diloco", "inner_steps": 4})
    assert (config["outer_lr"], config["outer_momentum"], config["fragments"], config["overlap_steps"]) == (
        0.7, 0.9, 1, 0)
    with pytest.raises(ValueError, match="setting inner_steps: inner_steps is a setting of sync local_sgd and diloco"):
        settings.check_training({"inner_steps": 4})


def _trial(trial_id, compressor, sync, step_time):
    return {"trial_id": trial_id, "name": trial_id, "status": "ok", "compressor": compressor, "num_workers": 2,
            "seed": 0, "sync": sync, "inner_steps": None if sync == "every_step" else 10,
            "step_time_s": step_time, "time_to_target_s": None}


def test_a_periodic_syncs_trials_are_compared_with_the_every_step_baselines():
    trials = pd.DataFrame([_trial("a", "fp32", "every_step", 1.0), _trial("b", "fp32", "diloco", 0.25),
                           _trial("c", "fp16", "diloco", 0.2)])
    baselines = tables._baselines(trials, "fp32")
    assert list(baselines["trial_id"]) == ["a"]
    speedups = tables.speedups(trials, baselines)
    assert list(speedups["speedup"]) == [1.0, 4.0, 5.0]


def test_inner_steps_beyond_the_runs_steps_is_refused_before_the_first_step():
    with pytest.raises(SettingError, match=r"setting inner_steps: 20 is more than the run's 10 steps \(2 epoch"):
        train({"model": "mlp", "width": 8, "depth": 1, "epochs": 2, "max_steps_per_epoch": 5, "sync": "local_sgd",
               "inner_steps": 20})


def test_an_overlapped_exchange_is_refused_on_gpus():
    with pytest.raises(ValueError, match="setting overlap_steps: an exchange beside the inner steps"):
        settings.check_training({"sync": "diloco", "inner_steps": 8, "overlap_steps": 1, "use_gpu": True,
                                 "backend": "nccl"})


def test_the_16bit_baseline_is_chosen_among_every_step_trials():
    trials = pd.DataFrame([_trial("a", "fp32", "every_step", 1.0), _trial("b", "fp16", "diloco", 0.25),
                           _trial("c", "bf16", "every_step", 0.5)])
    assert tables.sixteen_bit_baseline(trials) == "bf16"


def test_the_predictor_never_pools_a_periodic_syncs_trials_with_every_step_ones():
    from orchestrator.predict.trials import config_name

    every = {"compressor": "fp32", "compressor_params": {}, "algorithm": "allreduce", "sync": "every_step"}
    diloco = {**every, "sync": "diloco", "inner_steps": 50, "outer_lr": 0.7, "outer_momentum": 0.9, "fragments": 1,
              "overlap_steps": 0}
    assert config_name(every) == "fp32 algorithm=allreduce"
    assert config_name(diloco) == ("fp32 algorithm=allreduce sync=diloco inner_steps=50 outer_lr=0.7 "
                                   "outer_momentum=0.9 fragments=1 overlap_steps=0")
