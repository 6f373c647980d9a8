"""Run a sweep on Ray: one Tune trial per grid point, each on a gang of train workers.

Every Tune trial is a small function (``orchestrator.study.trial.run_trial``, ~0.01 CPU, in a
process Tune reuses from trial to trial) that takes ``num_workers`` worker processes from its pool
(``orchestrator.study.gang``: workers outlive a trial and serve the next trial of the same shape, so
a sweep of short trials does not spend its time starting processes), runs
``orchestrator.study.train_loop.train`` on them in a process group of the trial's own, and passes
rank 0's reports to Tune.

Results are written as trials finish, by a Tune callback: a record per trial
(orchestrator.study.records); the caller rebuilds the tables and plots from them
(orchestrator.results.export). A sweep that is interrupted loses only the trials that
were running; ``resume=True`` runs only the trials without a record.

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
import importlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from collections.abc import Callable, Set
from typing import Any, TextIO

from compressors.core.params import rate_bps

from . import env_info, predictor_inputs
from .sweep_file import Sweep, training_settings
from ..cluster.emulation import HEADROOM, HOST_RESOURCE, Cluster
from .progress import Progress
from .failures import reason_of
from .records import (CODE, SKIPPED, atomic_path, claim, finished_ids, folder_problem, in_use, kept_code, make_record,
                      read_records, retire, trials_dir, write_atomic, write_record)

_OBJECT_STORE_BYTES = 256 * 1024**2  # trials exchange only metrics; keep local Ray small
_JOIN_TIMEOUT_S = 10.0  # a cluster to join that accepts no connection in this long is not there
# The tables are rebuilt from the records during a sweep at most this often (and once at its end): a
# rebuild reads every record (about a second for 12 trials, more for larger sweeps), and the next trial
# waits for it.
REFRESH_S = 30.0


class RayUnreachable(RuntimeError):
    """No Ray cluster answers at the address to join."""


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


def run_sweep(sweep: Sweep, results: str | os.PathLike, *, address: str | None = None,
              resume: bool = False, max_concurrent_trials: int | None = None,
              stream: TextIO | None = None, emulation: Cluster | None = None,
              refresh: Callable[[Path], Any] | None = None,
              finish: Callable[[Path], Any] | None = None) -> tuple[Path, int]:
    """Run the trials of ``sweep`` not finished yet; returns the results folder and how many
    trials are still unfinished (nonzero only when the sweep was interrupted). ``emulation``: the
    emulated cluster this driver runs in (its Ray is the one joined); ``refresh(results)`` runs after
    the first trial's record is written and then at most every ``REFRESH_S`` seconds (the CLI rebuilds
    the tables there: a driver killed mid-sweep leaves tables up to that long behind the records, which
    its resume or ``lowprec export`` rebuild); ``finish(results)`` runs once the trials have ended or
    were interrupted (beside Ray's shutdown, in a thread of its own: the CLI rebuilds the tables and
    plots there), before this returns.
    OSError where the folder cannot be written."""
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
        return _run_locked(sweep, results, address, resume, max_concurrent_trials, stream, emulation, refresh,
                           finish or (lambda _: None))
    finally:
        lock.close()


def _run_locked(sweep: Sweep, results: Path, address: str | None, resume: bool,
                max_concurrent_trials: int | None, stream: TextIO | None,
                emulation: Cluster | None, refresh: Callable[[Path], Any] | None,
                finish: Callable[[Path], Any]) -> tuple[Path, int]:
    grid = {trial["trial_id"] for trial in sweep.trials}
    records = read_records(results)
    recorded = {record["trial_id"] for record in records}
    done = {record["trial_id"] for record in records if record["status"] != SKIPPED} & grid
    others = sorted(recorded - grid)
    if (done or others) and not resume:
        raise ResultsExist(_holds(results, len(done), len(others)))
    copy = results / "sweep.yaml"
    edited_in_place = copy.exists() and copy.samefile(sweep.path)  # `run results/x/sweep.yaml --resume`
    retired = retire(results, others, sweep.name, keep_sweep_file=not edited_in_place) if others else None
    # predictor inputs this sweep no longer needs (it changed): out of its predictions' way, kept
    inputs_folder = predictor_inputs.folder(results)
    measured = finished_ids(inputs_folder)
    stale = sorted(measured - set(predictor_inputs.wanted(sweep.trials)))
    if stale:
        retire(inputs_folder, stale, sweep.name, keep_sweep_file=False)
    if not edited_in_place:
        with atomic_path(copy) as temporary:
            shutil.copyfile(sweep.path, temporary)
    for written, path in sweep.files.items():  # the user's files, for a resume from the copy, anywhere
        kept = kept_code(results, written)
        if not (kept.exists() and kept.samefile(path)):
            with atomic_path(kept) as temporary:
                shutil.copyfile(path, temporary)
    todo = [trial for trial in sweep.trials if trial["trial_id"] not in done]
    measuring = _predictor_input_trials(sweep, emulation, max_concurrent_trials or sweep.max_concurrent_trials)
    extra = [trial for trial in measuring if trial["trial_id"] not in measured]
    progress = Progress(total=len(sweep.trials) + len(measuring),
                        finished=len(sweep.trials) - len(todo) + len(measuring) - len(extra),
                        stream=sys.stdout if stream is None else stream)  # sys.stdout as it is now
    if retired is not None:
        progress.note(f"note: {len(others)} record(s) of trials this sweep no longer has (it changed since they "
                      f"ran) moved from {trials_dir(results)} to {retired}, with the sweep file they ran from; "
                      f"the tables here hold this sweep's trials only (`lowprec export "
                      f"{shlex.quote(str(retired))}` rebuilds theirs)")
    if not todo and not extra:
        progress.note(f"nothing to run: every trial has a record in {results / 'trials'}")
        finish(results)
        return results, 0
    if extra:
        progress.note(f"then {len(extra)} short trial(s) that measure what the step-time predictions need: "
                      f"each configuration alone and on hosts sharing this machine (records in {inputs_folder})")
    grid_todo, todo = todo, todo + extra

    restore_sigterm = _sigterm_as_ctrl_c()
    ended, recorder = False, None
    try:
        if emulation is not None:
            _calibrate(emulation, todo, progress, quiet={predictor_inputs.SHARING_BANDWIDTH} - {
                t["bandwidth"] for t in grid_todo})
            address = emulation.address
        _start_ray(address, emulation, _shipped(sweep, results / CODE / ".shipped"))
        import ray
        from ray import tune

        from .trial import TRIAL_CPUS, run_trial  # imports Ray: only once _start_ray has set its environment

        logging.getLogger("ray.tune.execution.tune_controller").addFilter(_NoTrialTracebacks())
        logging.getLogger("ray.tune.tune").addFilter(_NoTuneResumeAdvice())
        logging.getLogger("ray.tune.analysis.experiment_analysis").addFilter(_NoMetricFilesWarning())
        environment = env_info.collect()
        environment["ray_cluster_resources"] = ray.cluster_resources()
        if emulation is not None:
            environment["emulation"] = emulation.summary()
        if any(trial["dataset"] == "python_source" for trial in sweep.trials):
            import workloads

            environment["python_source"] = workloads.python_source_info()  # which corpus, on this Python
        write_atomic(results / "environment.json", json.dumps(environment, indent=1))
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run = {
            "sweep": sweep.name,
            "cluster": sweep.cluster,
            # Trials one at a time keep their workers for the next trial of the same shape.
            "keep_workers": (max_concurrent_trials or sweep.max_concurrent_trials) == 1,
            "worker_counts": list(dict.fromkeys(t["num_workers"] for t in todo)),
            "codecs": _codecs(todo),
            # On a local run every worker gets the threads it has where the most workers share the machine:
            # a trial of 1 and one of 2 workers measure the same device.
            "threads": None if address or os.environ.get("RAY_ADDRESS") else max(
                1, (os.cpu_count() or 1) // max(t["num_workers"] for t in sweep.trials)),
            "emulation": None if emulation is None else {"prefix": emulation.prefix, "hosts": emulation.hosts,
                                                          "workers_per_host": emulation.workers_per_host,
                                                          "cpu_count": os.cpu_count(), "resource": HOST_RESOURCE},
        }
        # Each trial's record and the tables are this project's: Tune's CSV, JSON and TensorBoard loggers would
        # write every result once more, on the driver, between the trials' reports.
        os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
        progress.note(f"running {len(todo)} trial(s) of {sweep.name}; results in {results}")
        recorder = _recorder(results, progress, emulation, refresh, configurations=len({_configuration(t)
                                                                                       for t in sweep.trials}))
        tuner = tune.Tuner(
            tune.with_resources(run_trial, {"cpu": TRIAL_CPUS}),
            param_space={"point": tune.grid_search([{"trial": t, "settings": _settings(t), "predictor_input": False}
                                                    for t in grid_todo] +
                                                   [{"trial": t, "settings": _settings(t), "predictor_input": True}
                                                    for t in extra]), "run": run},
            tune_config=tune.TuneConfig(
                max_concurrent_trials=max_concurrent_trials or sweep.max_concurrent_trials,
                trial_name_creator=_trial_dirname,
                trial_dirname_creator=_trial_dirname,
                # Every trial is the same light function: a finished trial's process runs the next one,
                # with the idle workers it keeps (orchestrator.study.gang).
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                name=f"tune-{stamp}",
                storage_path=str(results / "ray"),
                callbacks=[recorder],
                stop=recorder.stopper,  # ends the sweep when a record cannot be written
                verbose=0,  # our Progress prints one line per event instead
            ),
        )
        tuner.fit()
        ended = True
    except KeyboardInterrupt:
        ended = True  # Ctrl-C or SIGTERM before Tune took them over (Ray starting), or a second one: counted below
    finally:
        if ended:
            _skip_hopeless(recorder, results, grid_todo, progress)
        # The tables and plots (seconds) are drawn while Ray shuts down (seconds of waiting on its processes).
        finishing = threading.Thread(target=finish, args=(results,), name="finish") if ended else None
        if finishing is not None:
            finishing.start()
        _stop_ray()
        restore_sigterm()
        if finishing is not None:
            finishing.join()
    finished, inputs_finished = finished_ids(results), finished_ids(inputs_folder)
    left = [t for t in grid_todo if t["trial_id"] not in finished]
    unfinished = len(left) + len([t for t in extra if t["trial_id"] not in inputs_finished])
    if recorder is not None and recorder.hopeless is not None:  # the rest were recorded as skipped
        unfinished = 0
    if unfinished:
        progress.note(f"interrupted: {unfinished} trial(s) not finished; to run them: "
                      f"{resume_command(sweep.path, results)}")
    return results, unfinished


def _skip_hopeless(recorder: Any, results: Path, grid: list[dict[str, Any]], progress: Progress) -> int:
    """Where the recorder stopped the sweep because nothing could succeed, record the grid's trials without a
    record as skipped, with that reason; how many."""
    if recorder is None or recorder.hopeless is None:
        return 0
    finished = finished_ids(results)
    left = [trial for trial in grid if trial["trial_id"] not in finished]
    for trial in left:
        write_record(results, make_record(trial, SKIPPED, recorder.hopeless, [], attempts=0))
    progress.note(f"stopped: every trial that ended failed with the same reason ({recorder.hopeless}); "
                  f"{len(left)} trial(s) that would fail alike recorded as skipped (a resume runs them)")
    return len(left)


def _configuration(trial: dict[str, Any]) -> str:
    """What tells a trial's configuration from another's: every setting but the seed."""
    return json.dumps({key: value for key, value in trial.items() if key not in ("name", "trial_id", "seed")},
                      sort_keys=True, default=str)


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


def _start_ray(address: str | None, emulation: Cluster | None = None, py_modules: list[str] = ()) -> None:
    """Join ``address`` (or RAY_ADDRESS, set by ``ray job submit``), else start a local Ray that
    listens on 127.0.0.1 only. Call before anything imports ray (the local address is read then).
    On an emulated cluster, wait until every host's node is alive. RayUnreachable where no cluster
    answers at the address; KeyboardInterrupt, with no Ray of this run left running, where Ctrl-C or
    SIGTERM came while Ray started."""
    # Old Tune output engine: it honours verbose=0 (the new one still prints boxes).
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    source = "--address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        _check_answers(address, source)
    else:
        # Ray's node address is the loopback one where Ray clusters are off (as on macOS): then
        # every server of a local Ray, its metrics endpoints too, listens on 127.0.0.1 only.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        # No idle workers started ahead: the trials' processes carry the sweep's runtime_env, which such
        # workers lack, so they would only take the cores while the trials' workers start.
        os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
        os.environ.setdefault("RAY_num_prestart_python_workers", "0")
    import ray

    # Tune's import (seconds of CPU) runs while ray.init waits on the processes it starts.
    import_in_background(f"{__package__}.trial")

    # Workers must import this checkout of the project (also where it is not pip-installed).
    package_root = str(Path(__file__).resolve().parent.parent)
    python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    env_vars = {"PYTHONPATH": python_path}
    if emulation is not None:
        env_vars.update({key: value for key, value in emulation.env().items() if key != "RAY_ADDRESS"})
    runtime_env: dict[str, Any] = {"env_vars": env_vars}
    if py_modules:  # the user's code, uploaded to every node of the cluster
        runtime_env["py_modules"] = list(py_modules)
    if address:
        # An interrupt here stops ray.init (it may wait minutes for a cluster that does not answer as one).
        try:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
        except ConnectionError as error:  # ray.init found no cluster ("auto"), or gave up on the address
            raise RayUnreachable(f"cannot join the Ray cluster at {address} ({source}): "
                                 f"{str(error).strip().splitlines()[0].rstrip('.')}") from None
        if emulation is not None:
            _wait_for_nodes(emulation.hosts)
        return
    # An interrupt inside ray.init leaves a half-started Ray (processes no one shuts down, at times a
    # crash at exit): it waits until ray.init returns (Ray bounds its start), then what started is shut down.
    with _HeldSignals() as held:
        try:
            ray.init(
                address="local",  # a new Ray even where `ray start` left a cluster address behind
                object_store_memory=_OBJECT_STORE_BYTES,
                include_dashboard=_dashboard_installed(),
                dashboard_host="127.0.0.1",
                runtime_env=runtime_env,
                log_to_driver=False,  # worker logs stay in the Ray session's log folder
            )
        except Exception:
            if not held.received:  # after an interrupt, what failed is the interrupt's doing
                raise
    if held.received:
        _stop_ray()
        raise KeyboardInterrupt


def import_in_background(module: str) -> None:
    """Import ``module`` in a thread of its own, while this one waits on something else (Ray's start). A
    failure is left to the import where the module is needed, which says why."""
    def load() -> None:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - see above
            pass

    threading.Thread(target=load, name=f"import-{module}", daemon=True).start()


def _check_answers(address: str, source: str, timeout_s: float = _JOIN_TIMEOUT_S) -> None:
    """RayUnreachable unless something accepts a connection within ``timeout_s`` at ``address`` (host:port, or
    ray://host:port) and where ray.init connects for it (Ray replaces a loopback host with this node's
    address): ray.init retries an address where nothing listens for many minutes. Other forms ("auto",
    other protocols) are left to ray.init."""
    where = f"{address} ({source})"
    problem = _no_answer(address.removeprefix("ray://"), timeout_s)
    if problem is None and "://" not in address:
        from ray._private.services import canonicalize_bootstrap_address  # Ray 2.60: what ray.init does

        try:
            target = canonicalize_bootstrap_address(address)
        except (ConnectionError, ValueError) as error:
            target, problem = None, str(error).strip().splitlines()[0].rstrip(".")
        if target and target != address:
            where = f"{address} ({source}; Ray connects to {target})"
            problem = _no_answer(target, timeout_s)
    if problem:
        raise RayUnreachable(f"cannot join the Ray cluster at {where}: {problem}; start it (`ray start --head`) "
                             "or correct the address")


def _no_answer(address: str, timeout_s: float) -> str | None:
    """Why nothing at ``address`` (host:port; other forms pass) accepts a TCP connection, or None."""
    host, _, port = address.rpartition(":")
    if "://" in address or not (host and port.isdigit()):
        return None
    if not 0 < int(port) < 65536:
        return "the port must be in [1, 65535]"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except ConnectionRefusedError:
        return "nothing listens there (connection refused)"
    except OSError as error:
        return error.strerror or str(error)
    return None


class _HeldSignals:
    """Within it, Ctrl-C and SIGTERM are held: ``received`` says whether one came. Their handlers stay as
    they were, also where the code inside sets its own (ray.init's SIGTERM handler exits on the spot)."""

    _HELD = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> "_HeldSignals":
        self.received = False
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():  # only the main thread has handlers
            self._previous = {signum: signal.signal(signum, self._hold) for signum in self._HELD}
            self._set_handler, signal.signal = signal.signal, self._keep
        return self

    def _hold(self, signum: int, frame: Any) -> None:
        self.received = True

    def _keep(self, signum: int, handler: Any) -> Any:
        return self._hold if signum in self._HELD else self._set_handler(signum, handler)

    def __exit__(self, *exc: Any) -> None:
        if self._previous:
            signal.signal = self._set_handler
            for signum, handler in self._previous.items():  # None: a handler not set from Python
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def _sigterm_as_ctrl_c() -> Callable[[], None]:
    """Make SIGTERM (a scheduler, `kill`) act as Ctrl-C: Tune stops the trials and the resume command is
    printed, where Ray's handler would dump a crash report. Returns what puts the handler back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _as_ctrl_c)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _as_ctrl_c(signum: int, frame: Any) -> None:
    """What Ctrl-C does now: Tune's handler while it runs trials, else KeyboardInterrupt (also where Ctrl-C
    is ignored, as in a background job)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def _stop_ray() -> None:
    """Shut down this process's Ray (a local one ends; a joined cluster goes on), with Ctrl-C and SIGTERM held:
    interrupted, ray.shutdown leaves processes behind."""
    ray = sys.modules.get("ray")
    if ray is not None:
        with _HeldSignals():
            ray.shutdown()


def _wait_for_nodes(count: int, timeout_s: float = 60.0) -> None:
    """Nodes started just before may take a moment to register with the head."""
    import time

    import ray

    deadline = time.monotonic() + timeout_s
    while (alive := sum(node["Alive"] for node in ray.nodes())) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {alive} of the emulated cluster's {count} Ray nodes are alive after "
                               f"{timeout_s:g} s: see `lowprec cluster status`")
        time.sleep(0.2)


def _dashboard_installed() -> bool:
    """ray[default] brings the dashboard's web server packages."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("aiohttp", "aiohttp_cors"))


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


def _point(trial: Any) -> dict[str, Any]:
    """The sweep's trial (a flat dict of settings) a Tune trial runs."""
    return trial.config["point"]["trial"]


def _trial_name(trial: Any) -> str:
    return _point(trial)["name"]


def _trial_dirname(trial: Any) -> str:
    return trial_dirname(_point(trial))


def _recorder(results: Path, progress: Progress, emulation: Cluster | None = None,
              refresh: Callable[[Path], Any] | None = None, refresh_every_s: float = REFRESH_S,
              configurations: int = 2) -> Any:
    """A Tune callback that keeps each trial's epochs and writes its record when it ends, with the
    calibration of its links on an emulated cluster (a predictor input's record in its own folder), then
    runs ``refresh(results)`` after the first record and after a later one where ``refresh_every_s`` have
    passed since. Where a record cannot be written (a full disk), it warns, records nothing more, and its
    ``stopper`` (a Tune stopper) ends the sweep: the trials without a record run on resume. Where every grid
    trial whose workers ran so far failed in them with one reason, at least two of them, of two
    configurations (or of the grid's only one: ``configurations``), it stops the sweep too, keeping that
    reason in ``hopeless``."""
    from ray import tune

    class Stop(tune.Stopper):
        def __init__(self, recorder: Any) -> None:
            self.recorder = recorder

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            return False

        def stop_all(self) -> bool:
            return self.recorder.stopped

    class Recorder(tune.Callback):
        def __init__(self) -> None:
            self.history: dict[str, list[dict[str, Any]]] = {}
            self.attempts: dict[str, int] = {}
            self.outcome: dict[str, dict[str, Any]] = {}
            self.stopped = False
            self.hopeless: str | None = None  # the one reason every ended trial failed with, once it stops
            self.ended: list[tuple[str, str, str | None]] = []  # (configuration, status, reason) of grid trials
            self.stopper = Stop(self)
            self.refreshed: float | None = None  # time.monotonic() of the last refresh

        def on_trial_start(self, iteration, trials, trial, **info):
            self.history[trial.trial_id] = []
            self.attempts[trial.trial_id] = 0
            progress.started(_trial_name(trial))

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if result.get("attempt_started"):
                self.attempts[trial.trial_id] += 1
                if self.history[trial.trial_id]:
                    progress.note(f"{_trial_name(trial)}: workers restarted (attempt "
                                  f"{self.attempts[trial.trial_id]}); its epochs start again")
                self.history[trial.trial_id] = []
            if "epoch_metrics" in result:
                self.history[trial.trial_id].append(result["epoch_metrics"])
                progress.epoch(_trial_name(trial), result["epoch_metrics"], _point(trial)["epochs"])
            if "outcome" in result:
                self.outcome[trial.trial_id] = result["outcome"]

        def on_trial_complete(self, iteration, trials, trial, **info):
            outcome = self.outcome.get(trial.trial_id, {
                "status": "failed", "reason": "the trial ended without the training loop's outcome"})
            path = self._finish(trial, outcome["status"], outcome["reason"], outcome.get("model_summary"),
                                outcome.get("worker_node_ips", "").split() or None, traceback=outcome.get("traceback"),
                                sources=json.loads(outcome["sources"]) if "sources" in outcome else None,
                                step_times=json.loads(outcome["step_times_s"]) if "step_times_s" in outcome else None,
                                judged=outcome["status"] != "failed" or outcome.get("in_workers", False))
            if path is not None and outcome.get("traceback"):
                progress.note(f"traceback of {_trial_name(trial)}: in its record {path} (\"traceback\")")

        def on_trial_error(self, iteration, trials, trial, **info):
            # Tune's error file lies in Ray's temporary folder: the record keeps its text.
            text = _error_text(trial)
            path = self._finish(trial, "failed", _error_reason(trial, text), traceback=text or None)
            if path is not None and text:
                progress.note(f"traceback of {_trial_name(trial)}: in its record {path} (\"traceback\")")

        def _finish(self, trial, status: str, reason: str | None, model_summary: dict | None = None,
                    worker_node_ips: list[str] | None = None, traceback: str | None = None,
                    sources: list[dict[str, Any]] | None = None, judged: bool = False,
                    step_times: list[float] | None = None) -> Path | None:
            history = self.history.pop(trial.trial_id, [])
            attempts = self.attempts.pop(trial.trial_id, 0)
            if self.stopped:  # the sweep is ending: this trial runs again on resume
                return None
            where = predictor_inputs.folder(results) if trial.config["point"]["predictor_input"] else results
            try:
                path = write_record(where, make_record(
                    _point(trial), status, reason, history, model_summary, attempts=attempts,
                    worker_node_ips=worker_node_ips, link=_link(emulation, _point(trial)),
                    traceback=traceback, sources=sources, step_times=step_times))
            except OSError as error:
                self.stopped = True
                progress.note(f"warning: could not write the record of {_trial_name(trial)} in "
                              f"{trials_dir(where)}: {error.strerror or error}; stopping the sweep (the records "
                              "written so far are safe)")
                return None
            progress.finished_trial(_trial_name(trial), status, reason, history)
            # A trial that could not run (placement, a time limit, this tool's own error) says nothing of the others.
            if judged and not trial.config["point"]["predictor_input"]:
                self.ended.append((_configuration(_point(trial)), status, reason))
                self.hopeless = _hopeless(self.ended, configurations)
                if self.hopeless is not None:
                    self.stopped = True
            now = time.monotonic()
            if refresh is None or (self.refreshed is not None and now - self.refreshed < refresh_every_s):
                return path
            self.refreshed = now
            try:
                refresh(results)
            except Exception as error:  # keep the sweep running; the record is safe on disk
                cause = error.strerror if isinstance(error, OSError) and error.strerror else repr(error)
                progress.note(f"warning: could not rebuild the tables yet: {cause}")
            return path

    return Recorder()


def _hopeless(ended: list[tuple[str, str, str | None]], configurations: int) -> str | None:
    """The reason every trial that ended failed with, where at least two ended, and they ran two
    configurations or the grid has one: then no other trial would do better. None otherwise."""
    reasons = {reason for _, status, reason in ended if status == "failed"}
    if len(ended) < 2 or len(reasons) != 1 or any(status != "failed" for _, status, _ in ended):
        return None
    if len({configuration for configuration, _, _ in ended}) < min(2, configurations):
        return None
    return reasons.pop()


def _error_reason(trial: Any, text: str) -> str:
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


def _error_text(trial: Any) -> str:
    """The trial's traceback (Tune writes its error file before calling back); empty where there is none."""
    path = Path(trial.error_file) if trial.error_file else None
    try:
        return path.read_text(errors="replace") if path and path.is_file() else ""
    except OSError:
        return ""


class _NoTuneResumeAdvice(logging.Filter):
    """After an interrupt Tune advises ``Tuner.restore(...)``; this tool resumes with ``--resume``
    (run_sweep says so)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tuner.restore(" not in record.getMessage()


class _NoMetricFilesWarning(logging.Filter):
    """Tune's own result files are off (TUNE_DISABLE_AUTO_CALLBACK_LOGGERS: the records are the results), so
    its result grid finds none and warns once per trial at the end."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to fetch metrics")


class _NoTrialTracebacks(logging.Filter):
    """Tune logs every failed trial's full traceback; Progress prints its reason, its record keeps the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Trial task failed")
