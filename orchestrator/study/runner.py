"""Run a sweep on Ray: one Tune trial per grid point, each on a gang of train workers.

Every Tune trial is a small function (``orchestrator.study.trial.run_trial``, ~0.01 CPU, in a
process Tune reuses from trial to trial) that takes ``num_workers`` worker processes from its pool
(``orchestrator.study.gang``: workers outlive a trial and serve the next trial of the same shape, so
a sweep of short trials does not spend its time starting processes), runs
``orchestrator.study.train_loop.train`` on them in a process group of the trial's own, and passes
rank 0's reports to Tune.

Results are written as trials finish, by a Tune callback (orchestrator.study.recorder): a record per
trial (orchestrator.study.records); the caller rebuilds the tables and plots from them
(orchestrator.results.export). A sweep that is interrupted loses only the trials that
were running; ``resume=True`` runs only the trials without a record. Ray is started or joined, and
shut down, by orchestrator.study.ray_session.

On an emulated cluster (orchestrator.cluster.emulation; this driver then runs in its
host 0) each worker asks for one ``emu_host``, of which a host has
``workers_per_host``, so a trial's workers fill hosts (packed as Ray Train packs them; the
ranks of a host are consecutive); every bandwidth the trials need is calibrated
before the first trial, and each trial re-shapes the links to its bandwidth
before its workers start. Its workers share this machine's cores: each gets
cores / (hosts x workers_per_host) torch threads (at least one), whatever the
trial's number of workers. There, after the grid, the sweep runs the short trials its step-time
predictions need (``orchestrator.study.predictor_inputs``), recorded apart from the grid's.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import re
import shlex
import shutil
import socket
import sys
import threading
from collections.abc import Callable, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from compressors.core.params import rate_bps

from ..cluster.emulation import HEADROOM, Cluster
from ..cluster.ray_nodes import HOST_RESOURCE
from . import env_info, predictor_inputs, ray_output, ray_session
from .hopeless import configuration, skip_hopeless
from .progress import Progress
from .records import (CODE, SKIPPED, atomic_path, claim, finished_ids, folder_problem, in_use, kept_code,
                      read_records, retire, trials_dir, write_atomic)
from .sweep_file import Sweep, training_settings

if TYPE_CHECKING:
    from .recorder import Recorder


class ResultsExist(RuntimeError):
    """The results folder cannot take this run: it already holds trials of this sweep and ``resume`` was
    not asked for, another run holds it, or it is not a folder this sweep may write
    (orchestrator.study.records.folder_problem)."""


def _lock(results: Path) -> TextIO:
    """Hold ``results/.lock`` for this run (released when the process ends, however it ends);
    ResultsExist naming the holder when another run has it."""
    handle = (results / ".lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise ResultsExist(in_use(results) or f"{results} is in use by another run") from None
    handle.seek(0)
    handle.truncate()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n")
    handle.flush()
    return handle


@dataclass
class _Run:
    """One run of a sweep into its results folder: what it was asked, then what it runs."""

    sweep: Sweep
    results: Path
    address: str | None  # the Ray cluster to join (an emulated cluster's, there)
    concurrent: int  # trials at the same time
    emulation: Cluster | None
    refresh: Callable[[Path], Any] | None
    finish: Callable[[Path], Any]
    progress: Progress | None = None
    grid: list[dict[str, Any]] = field(default_factory=list)  # the grid's trials without a record
    extra: list[dict[str, Any]] = field(default_factory=list)  # the predictor inputs to measure
    recorder: Recorder | None = None  # the Tune callback, once Ray runs

    @property
    def todo(self) -> list[dict[str, Any]]:
        return self.grid + self.extra


def run_sweep(sweep: Sweep, results: str | os.PathLike, *, address: str | None = None,
              resume: bool = False, max_concurrent_trials: int | None = None,
              stream: TextIO | None = None, emulation: Cluster | None = None,
              refresh: Callable[[Path], Any] | None = None,
              finish: Callable[[Path], Any] | None = None) -> tuple[Path, int]:
    """Run the trials of ``sweep`` not finished yet; returns the results folder and how many
    trials are still unfinished (nonzero only when the sweep was interrupted). ``emulation``: the
    emulated cluster this driver runs in (its Ray is the one joined); ``refresh(results)`` runs after
    the first trial's record is written and then at most every ``recorder.REFRESH_S`` seconds (the CLI
    rebuilds the tables there: a driver killed mid-sweep leaves tables up to that long behind the records,
    which its resume or ``lowprec export`` rebuild); ``finish(results)`` runs once the trials have ended or
    were interrupted (beside Ray's shutdown, in a thread of its own: the CLI rebuilds the tables and
    plots there), before this returns.
    OSError where the folder cannot be written; ray_session.RayUnreachable where no Ray cluster answers
    at the address to join."""
    results = Path(results).resolve()
    problem = in_use(results) or folder_problem(results, sweep.name)  # a run starting there: not a stranger's
    if problem:
        raise ResultsExist(problem)
    results.mkdir(parents=True, exist_ok=True)
    lock = _lock(results)
    try:
        problem = folder_problem(results, sweep.name)  # again, now that no other run can change it
        if problem:
            raise ResultsExist(problem)
        claim(results, sweep.name)
        run = _Run(sweep, results, address, max_concurrent_trials or sweep.max_concurrent_trials, emulation,
                   refresh, finish or (lambda _: None))
        return _run_locked(run, resume, sys.stdout if stream is None else stream)  # sys.stdout as it is now
    finally:
        lock.close()


def _run_locked(run: _Run, resume: bool, stream: TextIO) -> tuple[Path, int]:
    """run_sweep's work once it holds the results folder: the trials without a record run, and what is
    unfinished after is counted."""
    sweep, results = run.sweep, run.results
    records = read_records(results)
    grid = {trial["trial_id"] for trial in sweep.trials}
    done = {record["trial_id"] for record in records if record["status"] != SKIPPED} & grid
    others = sorted({record["trial_id"] for record in records} - grid)
    if (done or others) and not resume:
        raise ResultsExist(_holds(results, len(done), len(others)))
    retired, measured = _tidy(sweep, results, others)
    run.grid = [trial for trial in sweep.trials if trial["trial_id"] not in done]
    measuring = _predictor_input_trials(sweep, run.emulation, run.concurrent)
    run.extra = [trial for trial in measuring if trial["trial_id"] not in measured]
    run.progress = progress = Progress(total=len(sweep.trials) + len(measuring), stream=stream,
                                       finished=len(sweep.trials) - len(run.grid) + len(measuring) - len(run.extra))
    if retired is not None:
        progress.note(f"note: {len(others)} record(s) of trials this sweep no longer has (it changed since they "
                      f"ran) moved from {trials_dir(results)} to {retired}, with the sweep file they ran from; "
                      f"the tables here hold this sweep's trials only (`lowprec export "
                      f"{shlex.quote(str(retired))}` rebuilds theirs)")
    if not run.todo:
        progress.note(f"nothing to run: every trial has a record in {results / 'trials'}")
        run.finish(results)
        return results, 0
    if run.extra:
        progress.note(f"then {len(run.extra)} short trial(s) that measure what the step-time predictions need: "
                      f"each configuration alone and on hosts sharing this machine (records in "
                      f"{predictor_inputs.folder(results)})")
    _execute(run)
    unfinished = _unfinished(run)
    if unfinished:
        progress.note(f"interrupted: {unfinished} trial(s) not finished; to run them: "
                      f"{resume_command(sweep.path, results)}")
    return results, unfinished


def _tidy(sweep: Sweep, results: Path, others: list[str]) -> tuple[Path | None, set[str]]:
    """Move the records of trials the sweep no longer has (``others``) and the predictor inputs it no longer
    needs out of its way, and keep the sweep file and the user's files beside the records; returns where
    the records went (None: nowhere) and the predictor inputs measured."""
    copy = results / "sweep.yaml"
    edited_in_place = copy.exists() and copy.samefile(sweep.path)  # `run results/x/sweep.yaml --resume`
    retired = retire(results, others, sweep.name, keep_sweep_file=not edited_in_place) if others else None
    inputs_folder = predictor_inputs.folder(results)
    measured = finished_ids(inputs_folder)
    stale = sorted(measured - set(predictor_inputs.wanted(sweep.trials)))
    if stale:  # kept, out of its predictions' way
        retire(inputs_folder, stale, sweep.name, keep_sweep_file=False)
    if not edited_in_place:
        with atomic_path(copy) as temporary:
            shutil.copyfile(sweep.path, temporary)
    for written, path in sweep.files.items():  # the user's files, for a resume from the copy, anywhere
        kept = kept_code(results, written)
        if not (kept.exists() and kept.samefile(path)):
            with atomic_path(kept) as temporary:
                shutil.copyfile(path, temporary)
    return retired, measured


def _execute(run: _Run) -> None:
    """Run the trials on Ray; whether they ended or were interrupted, record the skipped ones of a hopeless
    sweep, then draw the tables and plots (``finish``, seconds) while Ray shuts down (seconds of waiting on
    its processes)."""
    restore_sigterm = ray_session.sigterm_as_ctrl_c()
    ended = False
    try:
        _run_on_ray(run)
        ended = True
    except KeyboardInterrupt:
        ended = True  # Ctrl-C or SIGTERM before Tune took them over (Ray starting), or a second one: counted below
    finally:
        if ended and run.recorder is not None:
            skip_hopeless(run.recorder.hopeless, run.results, run.grid, run.progress)
        finishing = threading.Thread(target=run.finish, args=(run.results,), name="finish") if ended else None
        if finishing is not None:
            finishing.start()
        ray_session.stop_ray()
        restore_sigterm()
        if finishing is not None:
            finishing.join()


def _run_on_ray(run: _Run) -> None:
    """Calibrate an emulated cluster's links, start or join Ray, and run the trials on Tune."""
    if run.emulation is not None:
        _calibrate(run.emulation, run.todo, run.progress, quiet={predictor_inputs.SHARING_BANDWIDTH} - {
            t["bandwidth"] for t in run.grid})
        run.address = run.emulation.address
    ray_session.start_ray(run.address, run.emulation, _shipped(run.sweep, run.results / CODE / ".shipped"))
    from .recorder import Recorder  # imports Ray: only once start_ray has set its environment

    ray_output.quiet_tune_logs()
    _write_environment(run)
    # Each trial's record and the tables are this project's: Tune's CSV, JSON and TensorBoard loggers would
    # write every result once more, on the driver, between the trials' reports.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    run.progress.note(f"running {len(run.todo)} trial(s) of {run.sweep.name}; results in {run.results}")
    run.recorder = Recorder(run.results, run.progress, run.emulation, run.refresh,
                            configurations=len({configuration(t) for t in run.sweep.trials}))
    _tuner(run).fit()


def _write_environment(run: _Run) -> None:
    """environment.json: this machine, its software, the Ray cluster and the emulated one."""
    import ray

    environment = env_info.collect()
    environment["ray_cluster_resources"] = ray.cluster_resources()
    if run.emulation is not None:
        environment["emulation"] = run.emulation.summary()
    if any(trial["dataset"] == "python_source" for trial in run.sweep.trials):
        import workloads

        environment["python_source"] = workloads.python_source_info()  # which corpus, on this Python
    write_atomic(run.results / "environment.json", json.dumps(environment, indent=1))


def _tuner(run: _Run) -> Any:
    """The Tune experiment of the trials to run: the grid's, then the predictor inputs."""
    from ray import tune

    from .trial import TRIAL_CPUS, run_trial

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    points = [{"trial": t, "settings": _settings(t), "predictor_input": False} for t in run.grid] + \
             [{"trial": t, "settings": _settings(t), "predictor_input": True} for t in run.extra]
    return tune.Tuner(
        tune.with_resources(run_trial, {"cpu": TRIAL_CPUS}),
        param_space={"point": tune.grid_search(points), "run": _run_settings(run)},
        tune_config=tune.TuneConfig(
            max_concurrent_trials=run.concurrent,
            trial_name_creator=_tune_dirname,
            trial_dirname_creator=_tune_dirname,
            # Every trial is the same light function: a finished trial's process runs the next one,
            # with the idle workers it keeps (orchestrator.study.gang).
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=f"tune-{stamp}",
            storage_path=str(run.results / "ray"),
            callbacks=[run.recorder],
            stop=run.recorder.stopper,  # ends the sweep when a record cannot be written
            verbose=0,  # our Progress prints one line per event instead
        ),
    )


def _run_settings(run: _Run) -> dict[str, Any]:
    """What every trial of the run shares (the trial function's ``config["run"]``)."""
    emulation = run.emulation
    return {
        "sweep": run.sweep.name,
        "cluster": run.sweep.cluster,
        # Trials one at a time keep their workers for the next trial of the same shape.
        "keep_workers": run.concurrent == 1,
        "worker_counts": list(dict.fromkeys(t["num_workers"] for t in run.todo)),
        "codecs": _codecs(run.todo),
        # On a local run every worker gets the threads it has where the most workers share the machine:
        # a trial of 1 and one of 2 workers measure the same device.
        "threads": None if run.address or os.environ.get("RAY_ADDRESS") else max(
            1, (os.cpu_count() or 1) // max(t["num_workers"] for t in run.sweep.trials)),
        "emulation": None if emulation is None else {"prefix": emulation.prefix, "hosts": emulation.hosts,
                                                      "workers_per_host": emulation.workers_per_host,
                                                      "cpu_count": os.cpu_count(), "resource": HOST_RESOURCE},
    }


def _unfinished(run: _Run) -> int:
    """How many of the run's trials have no record now (none where a hopeless sweep recorded them skipped)."""
    if run.recorder is not None and run.recorder.hopeless is not None:
        return 0
    finished, inputs_finished = finished_ids(run.results), finished_ids(predictor_inputs.folder(run.results))
    return len([t for t in run.grid if t["trial_id"] not in finished]) + \
        len([t for t in run.extra if t["trial_id"] not in inputs_finished])


def _tune_dirname(trial: Any) -> str:
    """A Tune trial's name and folder: its sweep trial's folder name."""
    return trial_dirname(trial.config["point"]["trial"])


def resume_command(sweep_file: Path, results: Path) -> str:
    """The command that runs the trials of a sweep without a record, quoted for a POSIX shell."""
    return shlex.join(["lowprec", "run", str(sweep_file), "--results", str(results), "--resume"])


def _holds(results: Path, done: int, others: int) -> str:
    """Why a run without --resume does not write into ``results``, which holds records."""
    held = [f"{done} finished trial(s) of this sweep"] if done else []
    held += [f"{others} record(s) of trials this sweep does not have (an earlier version of it)"] if others else []
    moved = f" (moving the {others} record(s) it does not have to {results / 'retired'})" if others else ""
    return (f"{results} already holds {' and '.join(held)}: pass --resume to run only this sweep's unfinished "
            f"trials{moved}, or choose another --results folder")


def trial_dirname(trial: dict[str, Any]) -> str:
    """A folder name for a trial: its label with anything but letters, digits, '.', '_', '=' and '-'
    replaced, capped in length, and made unique by its trial_id (the full settings are in its record)."""
    safe = re.sub(r"[^A-Za-z0-9._=-]+", "_", trial["name"]).strip("._")[:80]
    return f"{safe}-{trial['trial_id']}" if safe else trial["trial_id"]


def _predictor_input_trials(sweep: Sweep, emulation: Cluster | None, concurrent: int) -> list[dict[str, Any]]:
    """The predictor inputs a sweep on ``emulation`` runs; those over its links only where they can carry
    their rate, and trials run one at a time (each shapes the links to its rate); none where the sweep says so."""
    if emulation is None or not sweep.predictor_inputs:
        return []
    trials = predictor_inputs.predictor_input_trials(sweep.trials)
    if concurrent > 1 or emulation.rate_problem(predictor_inputs.SHARING_BANDWIDTH) is not None:
        trials = [t for t in trials if t["bandwidth"] != predictor_inputs.SHARING_BANDWIDTH]
    return trials


def _calibrate(emulation: Cluster, todo: list[dict[str, Any]], progress: Progress,
               quiet: Set[str] = frozenset()) -> None:
    """Calibrate each bandwidth the trials need that has no calibration yet, then shape the links to
    the first trial's (while no trial runs: a calibration saturates the links). ``quiet``: rates whose
    trials are meant to be limited by the machine (no warning that they may be)."""
    needed = list(dict.fromkeys(t["bandwidth"] for t in todo if t["bandwidth"] is not None))
    unshaped = emulation.calibrations.get("unshaped", {}).get("measured_bps")
    for rate in needed:
        if rate not in emulation.calibrations:
            found = emulation.shape(rate, recalibrate=True)
            progress.note(f"links at {rate}: calibrated {found['measured_bps'] / 1e6:.1f} Mbit/s "
                          f"({found['fraction']:.3f} of the rate)")
        if unshaped is not None and unshaped < HEADROOM * rate_bps(rate) and rate not in quiet:
            progress.note(f"warning: unshaped, the links carried {unshaped / 1e9:.2f} Gbit/s, less than "
                          f"{HEADROOM:g}x {rate}: at {rate} the machine, not the links, may set the pace")
    if needed and emulation.bandwidth != needed[0]:
        emulation.shape(needed[0])


def _shipped(sweep: Sweep, stage: Path) -> list[str]:
    """The user's files (copies in ``stage``) and packages every Ray node needs to import the sweep's
    references and imports."""
    import workloads

    texts = {text for trial in sweep.trials for text in (*(trial["imports"] or ()),
             *(trial[key] for key in ("model", "dataset") if workloads.references.is_reference(trial[key])
               and not trial[key].startswith(workloads.TORCHVISION_PREFIX)))}
    return workloads.references.shipped(sorted(texts), stage)


def _settings(trial: dict[str, Any]) -> dict[str, Any]:
    """The training loop's settings of a trial; a relative data_dir is relative to where the sweep started."""
    settings = training_settings(trial)
    if settings["data_dir"] is not None:
        settings["data_dir"] = os.path.join(os.getcwd(), settings["data_dir"])
    return settings


def _codecs(todo: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """The (compressor, params, impl) of the trials, each once: their kernels load before the first trial."""
    seen: dict[str, tuple[str, dict[str, Any], str]] = {}
    for trial in todo:
        codec = (trial["compressor"], trial["compressor_params"] or {}, trial["impl"])
        seen.setdefault(json.dumps(codec, sort_keys=True), codec)
    return list(seen.values())


