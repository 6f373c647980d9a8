"""The Tune callback that records each trial of a sweep when it ends, and the stopper it ends a sweep with.

A record (orchestrator.study.records) holds a trial's settings, outcome and last attempt's epochs, with
the calibration of its links on an emulated cluster; a predictor input's goes to its own folder
(orchestrator.study.predictor_inputs). Tune's own result files are off: the records are the results.

Imports Ray: import it once the runner has started Ray (orchestrator.study.ray_session).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.experiment import Trial

from ..cluster.emulation import Cluster
from . import predictor_inputs
from .failures import reason_of
from .hopeless import Ended, configuration, hopeless
from .progress import Progress
from .records import make_record, trials_dir, write_record

# The tables are rebuilt from the records during a sweep at most this often (and once at its end): a
# rebuild reads every record (about a second for 12 trials, more for larger sweeps), and the next trial
# waits for it.
REFRESH_S = 30.0


class StopWhenAsked(tune.Stopper):
    """Ends the whole sweep once its recorder has stopped; never one trial alone."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.recorder.stopped


class Recorder(tune.Callback):
    """Keeps each trial's epochs and writes its record when it ends, then runs ``refresh(results)`` after
    the first record and after a later one where ``refresh_every_s`` have passed since.

    Where a record cannot be written (a full disk), it warns, records nothing more, and its ``stopper``
    ends the sweep: the trials without a record run on resume. Where the grid's trials that ended are
    hopeless (orchestrator.study.hopeless; ``configurations``: how many the grid has), it stops the sweep
    too, keeping their one reason in ``hopeless``.
    """

    def __init__(self, results: Path, progress: Progress, emulation: Cluster | None = None,
                 refresh: Callable[[Path], Any] | None = None, refresh_every_s: float = REFRESH_S,
                 configurations: int = 2) -> None:
        self.results, self.progress, self.emulation = results, progress, emulation
        self.refresh, self.refresh_every_s, self.configurations = refresh, refresh_every_s, configurations
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.attempts: dict[str, int] = {}
        self.outcome: dict[str, dict[str, Any]] = {}
        self.stopped = False
        self.hopeless: str | None = None  # the one reason every ended trial failed with, once it stops
        self.ended: list[Ended] = []  # of the grid's trials
        self.stopper = StopWhenAsked(self)
        self.refreshed: float | None = None  # time.monotonic() of the last refresh

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.history[trial.trial_id] = []
        self.attempts[trial.trial_id] = 0
        self.progress.started(_trial_name(trial))

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any],
                        **info: Any) -> None:
        if result.get("attempt_started"):
            self.attempts[trial.trial_id] += 1
            if self.history[trial.trial_id]:
                self.progress.note(f"{_trial_name(trial)}: workers restarted (attempt "
                                   f"{self.attempts[trial.trial_id]}); its epochs start again")
            self.history[trial.trial_id] = []
        if "epoch_metrics" in result:
            self.history[trial.trial_id].append(result["epoch_metrics"])
            self.progress.epoch(_trial_name(trial), result["epoch_metrics"], _point(trial)["epochs"])
        if "outcome" in result:
            self.outcome[trial.trial_id] = result["outcome"]

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        outcome = self.outcome.get(trial.trial_id, {
            "status": "failed", "reason": "the trial ended without the training loop's outcome"})
        path = self._finish(trial, outcome["status"], outcome["reason"],
                            judged=outcome["status"] != "failed" or outcome.get("in_workers", False),
                            model_summary=outcome.get("model_summary"),
                            worker_node_ips=outcome.get("worker_node_ips", "").split() or None,
                            traceback=outcome.get("traceback"),
                            sources=json.loads(outcome["sources"]) if "sources" in outcome else None,
                            step_times=json.loads(outcome["step_times_s"]) if "step_times_s" in outcome else None)
        self._point_to_traceback(trial, path, outcome.get("traceback"))

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        # Tune's error file lies in Ray's temporary folder: the record keeps its text.
        text = _error_text(trial)
        path = self._finish(trial, "failed", _error_reason(trial, text), traceback=text or None)
        self._point_to_traceback(trial, path, text)

    def _point_to_traceback(self, trial: Trial, path: Path | None, traceback: str | None) -> None:
        if path is not None and traceback:
            self.progress.note(f"traceback of {_trial_name(trial)}: in its record {path} (\"traceback\")")

    def _finish(self, trial: Trial, status: str, reason: str | None, judged: bool = False,
                **fields: Any) -> Path | None:
        """Record the trial that ended (``fields``: make_record's), say so, judge the sweep by it (where it
        ``judged``: its workers ran) and refresh the tables; the record's path, None where none was written."""
        history = self.history.pop(trial.trial_id, [])
        attempts = self.attempts.pop(trial.trial_id, 0)
        if self.stopped:  # the sweep is ending: this trial runs again on resume
            return None
        path = self._write(trial, make_record(_point(trial), status, reason, history, attempts=attempts,
                                              link=_link(self.emulation, _point(trial)), **fields))
        if path is None:
            return None
        self.progress.finished_trial(_trial_name(trial), status, reason, history)
        # A trial that could not run (placement, a time limit, this tool's own error) says nothing of the others.
        if judged and not trial.config["point"]["predictor_input"]:
            self.ended.append((configuration(_point(trial)), status, reason))
            self.hopeless = hopeless(self.ended, self.configurations)
            if self.hopeless is not None:
                self.stopped = True
        self._refresh_tables()
        return path

    def _write(self, trial: Trial, record: dict[str, Any]) -> Path | None:
        """Write the record where its trial's records go; where it cannot be, stop the sweep."""
        where = predictor_inputs.folder(self.results) if trial.config["point"]["predictor_input"] else self.results
        try:
            return write_record(where, record)
        except OSError as error:
            self.stopped = True
            self.progress.note(f"warning: could not write the record of {_trial_name(trial)} in "
                               f"{trials_dir(where)}: {error.strerror or error}; stopping the sweep (the records "
                               "written so far are safe)")
            return None

    def _refresh_tables(self) -> None:
        now = time.monotonic()
        if self.refresh is None or (self.refreshed is not None and now - self.refreshed < self.refresh_every_s):
            return
        self.refreshed = now
        try:
            self.refresh(self.results)
        except Exception as error:  # keep the sweep running; the record is safe on disk
            cause = error.strerror if isinstance(error, OSError) and error.strerror else repr(error)
            self.progress.note(f"warning: could not rebuild the tables yet: {cause}")


def _point(trial: Trial) -> dict[str, Any]:
    """The sweep's trial (a flat dict of settings) a Tune trial runs."""
    return trial.config["point"]["trial"]


def _trial_name(trial: Trial) -> str:
    return _point(trial)["name"]


def _error_reason(trial: Trial, text: str) -> str:
    """A trial's error in its own words: the exception's type and first line (Tune's pickled error, its cause
    where Ray wrapped it), else the traceback's last line."""
    try:
        error = trial.get_pickled_error()
    except Exception:  # noqa: BLE001 - an error file that cannot be read: the text says what it can
        error = None
    if error is not None:
        return reason_of(getattr(error, "cause", None) or error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "the trial failed without an error message"


def _error_text(trial: Trial) -> str:
    """The trial's traceback (Tune writes its error file before calling back); empty where there is none."""
    path = Path(trial.error_file) if trial.error_file else None
    try:
        return path.read_text(errors="replace") if path and path.is_file() else ""
    except OSError:
        return ""


def _link(emulation: Cluster | None, trial: dict[str, Any]) -> dict[str, Any] | None:
    """The links a trial ran over: their rate and its calibration (None off an emulated cluster)."""
    if emulation is None:
        return None
    rate = trial["bandwidth"] or emulation.bandwidth
    calibration = emulation.calibrations.get(rate, {})
    return {"hosts": emulation.hosts, "workers_per_host": emulation.workers_per_host, "bandwidth": rate,
            "calibrated_bps": calibration.get("measured_bps"), "calibrated_latency_s": calibration.get("latency_s"),
            # what the links carried unshaped: the rate between the workers of one host is of its order
            "unshaped_bps": emulation.calibrations.get("unshaped", {}).get("measured_bps")}
