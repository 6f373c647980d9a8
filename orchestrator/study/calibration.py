"""The trials an emulated sweep runs beside its grid, so that its step-time predictions need no other sweep.

A sweep on an emulated cluster gets ``predicted_step_time_s`` beside each multi-worker trial's measured
step (``orchestrator.predict``). The model takes each configuration's step from what one worker measured
alone and from what the emulated hosts sharing this machine's cores cost. Both are measured in the same
run, by short trials recorded apart from the grid's (``FOLDER``, its own ``trials/`` and ``trials.csv``):

- *inputs*: each configuration on one worker, overlap off (a hierarchical configuration's input is its
  codec's sra: one worker compresses nothing hierarchically), unless the grid has that trial already;
- *sharing*: each configuration at each of the grid's worker counts, with overlap off and as the grid
  runs it, over links of ``SHARING_BANDWIDTH``, where the machine rather than the link sets the pace:
  each phase's slowdown, the links' latency per message under that load and the machine's busy time.

They are a few per configuration, of ``INPUT_STEPS`` or ``SHARING_STEPS`` steps; their accuracy means
nothing and no table of the sweep shows them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .labels import config_labels
from .settings import TRIAL_KEYS
from .sweep_file import trial_id_of

FOLDER = "calibration"
SHARING_BANDWIDTH = "2gbit"
INPUT_STEPS = 30
SHARING_STEPS = 20

# What a calibration trial keeps of its grid trial: the step it measures, not how long it trains.
_SHORT = {"epochs": 1, "warmup_epochs": 0, "eval_every_steps": None, "seed": 0}


def folder(results: Path) -> Path:
    """Where the calibration trials of the sweep in ``results`` keep their records and table."""
    return results / FOLDER


def calibration_trials(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calibration trials of a grid run on an emulated cluster (``trials``, each a settings dict with
    ``trial_id`` and ``name``); none where no trial has several workers over an emulated link."""
    multi = [t for t in trials if t["num_workers"] > 1 and t["bandwidth"] is not None]
    if not multi:
        return []
    alone = {trial_id_of(_input_of(t)) for t in trials if t["num_workers"] == 1}
    made: dict[str, dict[str, Any]] = {}
    for trial in multi:
        wanted = [_input_of(trial)]
        for overlap in dict.fromkeys((False, trial["overlap"])):
            wanted.append({**_settings(trial), **_SHORT, "max_steps_per_epoch": SHARING_STEPS,
                           "overlap": overlap, "bandwidth": SHARING_BANDWIDTH})
        for settings in wanted:
            trial_id = trial_id_of(settings)
            if trial_id not in alone:
                made.setdefault(trial_id, settings)
    names = config_labels([{**s, **(s["compressor_params"] or {})} for s in made.values()], ["overlap"],
                          extra=("num_workers",))
    return [{"name": f"calibration: {name}", "trial_id": trial_id, **settings}
            for name, (trial_id, settings) in zip(names, made.items())]


def _settings(trial: dict[str, Any]) -> dict[str, Any]:
    return {key: trial[key] for key in TRIAL_KEYS}


def _input_of(trial: dict[str, Any]) -> dict[str, Any]:
    """The one-worker trial that gives ``trial``'s configuration its times alone."""
    settings = {**_settings(trial), **_SHORT, "max_steps_per_epoch": INPUT_STEPS, "num_workers": 1,
                "overlap": False, "bandwidth": None}
    if settings["algorithm"] == "hierarchical":
        settings.update(algorithm="sra", intra=None, inter=None)
    return settings
