"""What Ray and Tune print on the sweep's driver: their warnings and errors, but not what our own lines say.

A sweep reports itself in Progress's lines (orchestrator.study.progress) and each trial's record. So:

- where the sweep starts its own Ray, Ray's INFO lines (its start, the packaging of ``runtime_env``
  files, Tune's end-of-run file syncs) are off: ``ray.init(logging_level=LOGGING_LEVEL)`` sets the
  driver's "ray" logger to warnings. A sweep that joins a cluster keeps them: they say which cluster it
  joined and what was shipped there;
- Tune prints no progress tables: the old output engine (``RAY_AIR_NEW_OUTPUT=0``) honours ``verbose=0``,
  which the runner passes (the new engine prints its boxes whatever the verbosity);
- four of Tune's log records are dropped, each said by our own lines (the filters below);
- Ray 2.60's warning that it turned token authentication on for a new local cluster does not come: the
  runner asks for it by name where it starts that cluster (orchestrator.study.ray_session).
"""
from __future__ import annotations

import logging
import os

LOGGING_LEVEL = logging.WARNING  # of the driver's "ray" logger


def quiet_environment() -> None:
    """Set what Tune reads from the environment; before Tune runs."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")


def quiet_tune_logs() -> None:
    """Drop Tune's log records that our own lines say; once Tune is imported."""
    logging.getLogger("ray.tune.execution.tune_controller").addFilter(_NoTrialTracebacks())
    tune_logger = logging.getLogger("ray.tune.tune")
    tune_logger.addFilter(_NoTuneResumeAdvice())
    tune_logger.addFilter(_NoIncompleteTrials())
    logging.getLogger("ray.tune.analysis.experiment_analysis").addFilter(_NoMetricFilesWarning())


class _NoTuneResumeAdvice(logging.Filter):
    """After an interrupt Tune advises ``Tuner.restore(...)``; this tool resumes with ``--resume``
    (run_sweep says so)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tuner.restore(" not in record.getMessage()


class _NoIncompleteTrials(logging.Filter):
    """Tune logs an error naming every trial that did not complete: one that failed (Progress printed it as
    FAILED, its record keeps why), or one left when the sweep was stopped or interrupted (Progress said
    why, and run_sweep prints the command that runs it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Trials did not complete")


class _NoMetricFilesWarning(logging.Filter):
    """Tune's own result files are off (TUNE_DISABLE_AUTO_CALLBACK_LOGGERS: the records are the results), so
    its result grid finds none and warns once per trial at the end."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to fetch metrics")


class _NoTrialTracebacks(logging.Filter):
    """Tune logs every failed trial's full traceback; Progress prints its reason, its record keeps the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Trial task failed")
