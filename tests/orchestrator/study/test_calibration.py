"""The trials an emulated sweep runs beside its grid for its step-time predictions
(orchestrator/study/calibration.py): which, with which settings, each once.
"""
from __future__ import annotations

from orchestrator.study import calibration
from orchestrator.study.settings import TRIAL_KEYS
from orchestrator.study.sweep_file import load_sweep, settings_of, trial_id_of
from tests.helpers import write

EMULATED = """\
name: emu
workload: {target_accuracy: 0.5, epochs: 3, eval_every_steps: 5}
cluster:
  emulate: {hosts: 2, workers_per_host: 2}
max_concurrent_trials: 1
sweep:
  num_workers: 4
  seed: [0, 1]
  bandwidth: [100mbit, 1gbit]
  compressor:
    - {name: qsgd, bits: 4, algorithm: [sra, hierarchical]}
"""


def _short(trial: dict) -> dict:
    return {k: trial[k] for k in ("compressor", "algorithm", "num_workers", "overlap", "bandwidth", "seed",
                                  "epochs", "max_steps_per_epoch", "eval_every_steps", "intra")}


def test_each_configuration_gets_an_input_alone_and_sharing_trials_at_the_grids_worker_counts(tmp_path):
    grid = load_sweep(write(tmp_path, EMULATED)).trials
    assert len(grid) == 16  # fp32, fp16, qsgd sra, qsgd hierarchical x 2 seeds x 2 bandwidths
    made = calibration.calibration_trials(grid)
    inputs = sorted((t["compressor"], t["algorithm"]) for t in made if t["num_workers"] == 1)
    # the hierarchical configuration's input is its codec's sra, which the sra configuration needs too: once
    assert inputs == [("fp16", "allreduce"), ("fp32", "allreduce"), ("qsgd", "sra")]
    for trial in made:
        if trial["num_workers"] == 1:
            assert _short(trial) == {**_short(trial), "overlap": False, "bandwidth": None, "seed": 0, "epochs": 1,
                                     "max_steps_per_epoch": calibration.INPUT_STEPS, "eval_every_steps": None,
                                     "intra": None}
    sharing = sorted((t["compressor"], t["algorithm"], t["overlap"]) for t in made if t["num_workers"] > 1)
    # overlap off (its phases add up) and as the grid runs it (on): each configuration of the grid, once
    assert sharing == sorted((c, a, o) for c, a in [("fp16", "allreduce"), ("fp32", "allreduce"), ("qsgd", "sra"),
                                                     ("qsgd", "hierarchical")] for o in (False, True))
    for trial in made:
        if trial["num_workers"] > 1:
            assert (trial["num_workers"], trial["bandwidth"], trial["seed"], trial["epochs"],
                    trial["max_steps_per_epoch"]) == (4, calibration.SHARING_BANDWIDTH, 0, 1,
                                                      calibration.SHARING_STEPS)
    # each a trial of its own: ids of its settings, none a grid trial's, names that say what they are
    for trial in made:
        assert set(settings_of(trial)) == set(TRIAL_KEYS)
        assert trial["trial_id"] == trial_id_of(settings_of(trial))
        assert trial["name"].startswith("calibration: ")
    assert len({t["trial_id"] for t in made}) == len(made) == 11
    assert not {t["trial_id"] for t in made} & {t["trial_id"] for t in grid}


def test_a_grid_with_one_worker_trials_is_its_own_input_and_a_grid_without_links_needs_none(tmp_path):
    with_ones = load_sweep(write(tmp_path, EMULATED.replace("num_workers: 4", "num_workers: [1, 4]")
                                .replace("epochs: 3, eval_every_steps: 5", "epochs: 1, max_steps_per_epoch: 30")
                                .replace("seed: [0, 1]", "seed: 0").replace("[100mbit, 1gbit]", "100mbit"))).trials
    made = calibration.calibration_trials(with_ones)
    # the grid's one-worker trials are the calibration's inputs, bandwidth and all; only the sharing is added
    assert [t for t in made if t["num_workers"] == 1] == []
    assert len(made) == 8
    one_worker_only = [t for t in with_ones if t["num_workers"] == 1]
    assert calibration.calibration_trials(one_worker_only) == []
