"""The trials an emulated sweep runs beside its grid for its step-time predictions
(orchestrator/study/predictor_inputs.py): which, with which settings, each once, none twice.
"""
from __future__ import annotations

from orchestrator.study import predictor_inputs
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
    - {name: qsgd, bits: 4, algorithm: hierarchical, workload: {inter: allgather}}
    - powersgd
"""


def _short(trial: dict) -> dict:
    return {k: trial[k] for k in ("compressor", "algorithm", "num_workers", "overlap", "bandwidth", "seed",
                                  "epochs", "max_steps_per_epoch", "eval_every_steps", "intra", "inter")}


def test_each_configuration_gets_an_input_alone_and_sharing_trials_at_the_grids_worker_counts(tmp_path):
    grid = load_sweep(write(tmp_path, EMULATED)).trials
    assert len(grid) == 24  # fp32, fp16, qsgd sra, two qsgd hierarchical, powersgd x 2 seeds x 2 bandwidths
    made = predictor_inputs.predictor_input_trials(grid)
    inputs = sorted((t["compressor"], t["algorithm"]) for t in made if t["num_workers"] == 1)
    # the hierarchical configurations' input is their codec's sra, which the sra configuration needs too: once;
    # PowerSGD is not modelled: nothing
    assert inputs == [("fp16", "allreduce"), ("fp32", "allreduce"), ("qsgd", "sra")]
    for trial in made:
        if trial["num_workers"] == 1:
            assert _short(trial) == {**_short(trial), "overlap": False, "bandwidth": None, "seed": 0, "epochs": 1,
                                     "max_steps_per_epoch": predictor_inputs.INPUT_STEPS, "eval_every_steps": None,
                                     "intra": None, "inter": None}
    sharing = sorted((t["compressor"], t["algorithm"], str(t["inter"]), t["overlap"])
                     for t in made if t["num_workers"] > 1)
    # overlap off (its phases add up) and as the grid runs it (on): each configuration of the grid, once
    assert sharing == sorted((c, a, i, o) for c, a, i in [("fp16", "allreduce", "None"), ("fp32", "allreduce", "None"),
                                                          ("qsgd", "sra", "None"), ("qsgd", "hierarchical", "None"),
                                                          ("qsgd", "hierarchical", "allgather")]
                             for o in (False, True))
    for trial in made:
        if trial["num_workers"] > 1:
            assert (trial["num_workers"], trial["bandwidth"], trial["seed"], trial["epochs"],
                    trial["max_steps_per_epoch"]) == (4, predictor_inputs.SHARING_BANDWIDTH, 0, 1,
                                                      predictor_inputs.SHARING_STEPS)
    # each a trial of its own: ids of its settings, none a grid trial's, names that tell them apart
    for trial in made:
        assert set(settings_of(trial)) == set(TRIAL_KEYS)
        assert trial["trial_id"] == trial_id_of(settings_of(trial))
        assert trial["name"].startswith("predictor input: ")
    assert len({t["trial_id"] for t in made}) == len({t["name"] for t in made}) == len(made) == 13
    assert not {t["trial_id"] for t in made} & {t["trial_id"] for t in grid}
    assert {t["trial_id"] for t in made} <= set(predictor_inputs.wanted(grid))


def test_a_grid_trial_that_is_a_predictor_input_serves_as_it_and_runs_once(tmp_path):
    # the grid's one-worker trials are the inputs (bandwidth, length and seed aside); its 2gbit trials of 20 steps
    # in one epoch are the sharing trials with overlap on: only those with overlap off are added
    sweep = EMULATED.replace("num_workers: 4", "num_workers: [1, 4]").replace(
        "epochs: 3, eval_every_steps: 5", f"epochs: 1, max_steps_per_epoch: {predictor_inputs.SHARING_STEPS}").replace(
        "seed: [0, 1]", "seed: 0").replace("[100mbit, 1gbit]", predictor_inputs.SHARING_BANDWIDTH).replace(
        "    - powersgd\n", "")
    grid = load_sweep(write(tmp_path, sweep)).trials
    made = predictor_inputs.predictor_input_trials(grid)
    assert [t for t in made if t["num_workers"] == 1] == []
    assert sorted(t["overlap"] for t in made) == [False] * 5
    wanted = predictor_inputs.wanted(grid)
    assert {t["trial_id"] for t in grid if t["num_workers"] == 4} <= set(wanted)
    # a one-worker hierarchical trial is no input (one worker compresses nothing): its sra input still runs
    hierarchical_alone = [t for t in grid if t["algorithm"] == "hierarchical" and t["num_workers"] == 1] + \
        [t for t in grid if t["algorithm"] == "hierarchical" and t["num_workers"] == 4]
    assert ("qsgd", "sra") in {(t["compressor"], t["algorithm"])
                               for t in predictor_inputs.predictor_input_trials(hierarchical_alone)
                               if t["num_workers"] == 1}
    # without trials of several workers over an emulated link there is nothing to predict
    assert predictor_inputs.predictor_input_trials([t for t in grid if t["num_workers"] == 1]) == []


def test_a_dry_run_lists_them_and_a_sweep_may_go_without(tmp_path, capsys):
    from orchestrator.cli import main

    assert main(["run", str(write(tmp_path, EMULATED)), "--dry_run"]) == 0
    listed = capsys.readouterr().out
    assert "then, on an emulated cluster, 13 predictor inputs" in listed and "predictor input: qsgd" in listed
    assert main(["run", str(write(tmp_path, EMULATED + "predictor_inputs: false\n")), "--dry_run"]) == 0
    assert "predictor input" not in capsys.readouterr().out
    assert load_sweep(write(tmp_path, EMULATED + "predictor_inputs: false\n")).predictor_inputs is False
