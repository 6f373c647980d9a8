"""What the predictor times on this machine: the model's step profile (``orchestrator.predict.profile``)
and the reduction rate (how fast it sums two fp32 buffers: the ring's reduction).

Timings are noisy from call to call: ``measured`` caches both in the results folder (``CACHE_DIR``), and
later calls reuse them, so the same folder and arguments give the same predictions.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..study.records import write_atomic
from .profile import Profile, device_of, profile
from .trials import step_key

CACHE_DIR = "predict_cache"


def reduction_rate(numel: int = 1 << 22, repeats: int = 5) -> float:
    """This machine's summing throughput (bytes of one operand per second): the ring's reduction."""
    a, b = torch.ones(numel), torch.ones(numel)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        a.add_(b)
        times.append(time.perf_counter() - t0)
    return 4 * numel / sorted(times[1:])[repeats // 2]


def workload_profile(settings: dict[str, Any], profiles: dict[str, Profile | None]) -> Profile | None:
    """The step profile of ``settings``' workload, from ``profiles`` (by workload) where an earlier call put it,
    else measured here and put there; None, with a warning, where the model cannot be built here."""
    workload = step_key(settings)[0]
    if workload not in profiles:
        try:
            profiles[workload] = profile(settings)
        except (OSError, ValueError) as error:  # e.g. a data_dir relative to where the sweep ran
            warnings.warn(f"no step-time prediction for model {settings['model']}: it could not be built here "
                          f"({error})", stacklevel=2)
            profiles[workload] = None
    return profiles[workload]


def _cached(path: Path, valid: Callable[[Any], Any]) -> Any:
    """``valid(data)`` of the JSON in ``path``; None where there is none, or it is unreadable or not valid."""
    try:
        return valid(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _cached_rate(data: dict[str, Any]) -> float | None:
    """The cached reduction rate; None (measure again) where it is not a positive number (an edit)."""
    rate = float(data["reduce_bps"])
    return rate if 0 < rate < math.inf else None


def _cached_profile(workload: str, device: str) -> Callable[[dict[str, Any]], Profile | None]:
    """A reader of a cached profile of ``workload`` measured on a ``device`` (cpu, cuda): None (measure again)
    for another workload's (a hash collision), another device's (a GPU here now), or for times no step takes
    (an edit)."""
    def read(data: dict[str, Any]) -> Profile | None:
        found = Profile.from_json(data["profile"])
        times = [found.fwd_s, found.bwd_s, found.opt_s, *(ready for _, ready in found.params)]
        usable = all(math.isfinite(t) and t >= 0 for t in times) and found.fwd_s + found.bwd_s + found.opt_s > 0
        return found if usable and data["workload"] == workload and data.get("device", "cpu") == device else None
    return read


def measured(results: Path, settings: dict[str, Any], prof: Profile | None = None) -> tuple[Profile, float, list[str]]:
    """The model's step profile (of ``settings``' workload; ``prof`` where given) and this machine's reduction
    rate, each from ``results``/predict_cache where an earlier call left it, else measured here and cached
    there; with a line for the user where a cache was made or could not be. What is used is what the cache
    holds (JSON keeps a float's repr), so the first call's predictions equal the later ones'."""
    cache = results / CACHE_DIR
    workload = step_key(settings)[0]
    profile_path = cache / f"profile-{hashlib.sha256(workload.encode()).hexdigest()[:16]}.json"
    rate_path = cache / "reduce.json"
    made: dict[Path, str] = {}
    device = device_of(settings).type
    measured_here = prof is None
    if prof is None:
        prof = _cached(profile_path, _cached_profile(workload, device))
        if prof is None:
            prof = profile(settings)
            made[profile_path] = json.dumps({"workload": workload, "device": device, "profile": prof.to_json()})
    rate = _cached(rate_path, _cached_rate)
    if rate is None:
        rate = reduction_rate()
        made[rate_path] = json.dumps({"reduce_bps": rate})
    notes = _write_cache(cache, made, profile_path)
    if measured_here and settings.get("use_gpu") and device != "cuda":
        notes.append("the trials ran on a GPU and this machine has none: the model's profile (its split of the "
                     "step, when each gradient is ready) was measured on this CPU, then scaled to the fp32 trial's "
                     "compute time")
    return prof, rate, notes


def _write_cache(cache: Path, made: dict[Path, str], profile_path: Path) -> list[str]:
    """Write each of ``made`` (path: text) into ``cache``; the line that says so, or that it could not."""
    if not made:
        return []
    what = " and ".join(("the model's step profile" if path == profile_path else "this machine's reduction "
                         "throughput") for path in made)
    try:
        for path, text in made.items():
            write_atomic(path, text)
    except OSError as error:
        return [f"could not cache {what} in {cache} ({error.strerror or error}): each call measures them again, "
                "and their noise moves the predictions"]
    them = "them" if len(made) > 1 else "it"
    return [f"measured {what} and cached {them} in {cache}: later calls reuse {them} (delete the folder to measure "
            "again)"]
