"""The trials an emulated sweep runs beside its grid, so that its step-time predictions need no other sweep.

A sweep on an emulated cluster gets ``predicted_step_time_s`` beside each multi-worker trial's measured
step (``orchestrator.predict``). The model takes each configuration's step from what one worker measured
alone and from what the emulated hosts sharing this machine's cores cost. Both are measured in the same
run, by short trials, the *predictor inputs*, recorded apart from the grid's (``FOLDER``, its own
``trials/`` and ``trials.csv``):

- each configuration on one worker, overlap off (a hierarchical configuration's input is its codec's
  sra: one worker compresses nothing hierarchically);
- each configuration at each of the grid's worker counts, with overlap off and as the grid runs it,
  over links of ``SHARING_BANDWIDTH``, where the machine rather than the link sets the pace: each
  phase's slowdown, the latency per message under that load and the machine's busy time.

They are a few per configuration, of ``INPUT_STEPS`` or ``SHARING_STEPS`` steps; their accuracy means
nothing and no table of the sweep shows them. A grid trial that is one of them serves as it and does
not run twice. Configurations the model does not know (hook-only methods such as PowerSGD) get none, nor
GPU trials: what these inputs measure is the sharing of an emulated cluster's CPU cores.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from compressors.core.registry import own_communication

from .labels import config_labels
from .settings import TRIAL_KEYS, param
from .sweep_file import trial_id_of

FOLDER = "predictor_inputs"
SHARING_BANDWIDTH = "2gbit"
INPUT_STEPS = 30
SHARING_STEPS = 20

# What a predictor input keeps of its grid trial: the step it measures, not how long it trains.
_SHORT = {"epochs": 1, "warmup_epochs": 0, "eval_every_steps": None, "seed": 0}


def folder(results: Path) -> Path:
    """Where the predictor inputs of the sweep in ``results`` keep their records and table."""
    return results / FOLDER


def wanted(trials: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every predictor input a grid run on an emulated cluster needs (``trials``: settings dicts), by trial
    id, the grid's own among them; none where no trial has several workers over an emulated link."""
    every = [_settings(t) for t in trials]
    multi = [t for t in every if t["num_workers"] > 1 and t["bandwidth"] is not None and _modelled(t)]
    needed: dict[str, dict[str, Any]] = {}
    for trial in multi:
        for settings in [_input_of(trial), *({**_settings(trial), **_SHORT, "max_steps_per_epoch": SHARING_STEPS,
                                              "overlap": overlap, "bandwidth": SHARING_BANDWIDTH}
                                             for overlap in dict.fromkeys((False, trial["overlap"])))]:
            needed.setdefault(trial_id_of(settings), settings)
    return needed


def predictor_input_trials(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The predictor inputs a grid (``trials``, each with ``trial_id`` and ``name``) runs after its own trials:
    those ``wanted`` that the grid does not run, nor already has on one worker (a one-worker trial of a
    configuration, whatever its seed, length or bandwidth, is its input)."""
    have = {t["trial_id"] for t in trials}
    have |= {trial_id_of(_input_of(t)) for t in map(_settings, trials)
             if t["num_workers"] == 1 and t["algorithm"] != "hierarchical"}
    made = {trial_id: settings for trial_id, settings in wanted(trials).items() if trial_id not in have}
    names = config_labels([{**s, **(s["compressor_params"] or {})} for s in made.values()],
                          ["overlap", "intra", "inter"], extra=("num_workers",))
    return [{"name": f"predictor input: {name}", "trial_id": trial_id, **settings}
            for name, (trial_id, settings) in zip(names, made.items())]


def _modelled(trial: dict[str, Any]) -> bool:
    """Whether predictor inputs serve the trial: not for a hook-only or optimizer method (no payload codec of its
    own, which the model does not know), nor for a GPU trial (they measure how hosts share CPU cores)."""
    return not own_communication(trial["compressor"]) and not trial["use_gpu"]


def _settings(trial: dict[str, Any]) -> dict[str, Any]:
    # a record of an older version may lack a setting added since: it ran with its default
    return {key: trial.get(key, param(key).default) for key in TRIAL_KEYS}


def _input_of(trial: dict[str, Any]) -> dict[str, Any]:
    """The one-worker trial that gives ``trial``'s configuration its times alone."""
    settings = {**_settings(trial), **_SHORT, "max_steps_per_epoch": INPUT_STEPS, "num_workers": 1,
                "overlap": False, "bandwidth": None}
    if settings["algorithm"] == "hierarchical":
        settings.update(algorithm="sra", intra=None, inter=None)
    return settings
