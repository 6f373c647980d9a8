"""Command line: ``lowprec`` / ``python -m orchestrator``.

    validate SWEEP.yaml            check the file, print the trials it expands to (no Ray)
    run SWEEP.yaml [--address ADDR] [--results RESULTS] [--resume] [--dry_run]
                   [--max_concurrent_trials N]
                                   run the sweep on a local Ray, or join ADDR (or RAY_ADDRESS,
                                   as under `ray job submit`); RESULTS: the sweep's results
                                   folder, default results/<sweep name>
    export RESULTS                 rebuild tables and plots from the per-trial records
    predict RESULTS --bandwidth RATE --num_workers N [OPTION ...]
                                   each configuration's step time, speedups and quality change
                                   (accuracy in points, or a loss study's test loss in nats)
                                   on another cluster, from the folder's one-worker trials
                                   (performance model: orchestrator.predict.perfmodel); caches
                                   what it measures here in RESULTS/predict_cache/, writes
                                   RESULTS/predictions/<a name of its options>.csv; --link FILE
                                   (cluster probe's) in place of --bandwidth and --latency
    predict --model NAME --input_shape S --batch_size B --step_time T --bandwidth RATE --num_workers N
                                   the same from what a user knows, no trials: the model's layout,
                                   its step on one device (orchestrator.predict.from_step)
    advise RESULTS ... (as predict) [--max_accuracy_loss POINTS | --max_loss_increase NATS]
                                   the configuration that pays most there among those that reached
                                   the target within that many points of fp32's accuracy (a loss
                                   study: nats of fp32's test loss), and why,
                                   or none; what it left out and why; writes the file predict writes
                                   (their options: orchestrator.predict.options, cli_predict)
    cluster up --hosts N --bandwidth RATE [--workers_per_host G] [--prefix P] [--subnet S] [--no_ray]
                                   an emulated cluster on this machine (root): N network
                                   namespaces with links shaped to RATE (100mbit, 1gbit),
                                   calibrated, one Ray node each with G worker slots
                                   (orchestrator.cluster.emulation; cli_cluster)
    cluster shape RATE [--calibrate]   re-shape every link while Ray runs
    cluster exec [--prefix P] I CMD...
                                   run CMD in emulated host I (0: where drivers run)
    cluster status | cluster down  its links, calibrations, processes | end it all by PID
    cluster probe --address ADDR --out FILE [--backend gloo|nccl] [--nodes N]
                                   a real Ray cluster's links between its nodes: all_reduce and
                                   all_gather bus bandwidth, latency (predict --link FILE)

A sweep whose cluster section has ``emulate`` brings its own emulated cluster up
and down; ``run --address`` of a cluster from ``cluster up`` runs the driver
inside its host 0.

Flags are spelled as the settings they set, with underscores.

Exit status: 0 done, at least one trial ok (failed trials are results too); 1 no
trial finished ok, interrupted, or a runtime error; 2 a bad sweep file (the
preflight's findings included) or usage.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import cli_cluster, cli_predict
from .study import predictor_inputs
from .study.sweep_file import SweepFileError, Sweep, load_sweep

_DRIVER_GRACE_S = 60.0  # an interrupted driver's time to write its records and tables
# What --help says above the commands, as a terminal shows it.
_DESCRIPTION = ("Does low-precision gradient communication pay off on your cluster? Run sweeps of compressors, "
                "rebuild their tables, predict another cluster, emulate one on this machine (python -m "
                "orchestrator is the same command).")


def format_trials(trials: list[dict[str, Any]]) -> str:
    """The expanded trials as a fixed-width table: number, trial_id and name (its label)."""
    if not trials:
        return "(no trials)"
    rows = [["#", "trial_id", "name"]] + [[str(i), t["trial_id"], t["name"]] for i, t in enumerate(trials, 1)]
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lowprec", description=_DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", help="check a sweep file and list its trials (no Ray)")
    validate.add_argument("sweep", type=Path)
    _add_run(commands.add_parser("run", help="run a sweep on Ray"))
    export = commands.add_parser("export", help="rebuild tables and plots of a results folder")
    export.add_argument("results", type=Path)
    cli_predict.add_parsers(commands.add_parser)
    cli_cluster.add_parser(commands.add_parser)
    return parser


def _add_run(run: argparse.ArgumentParser) -> None:
    run.add_argument("sweep", type=Path)
    run.add_argument("--address", help="Ray cluster to join (default: RAY_ADDRESS, else a local Ray)")
    run.add_argument("--results", type=Path, default=None,
                     help="the sweep's results folder (default: results/<sweep name>, or the results folder whose "
                          "copy of the sweep file this is); under 'ray job submit' "
                          "required, as an absolute path on the node the job's driver runs on")
    run.add_argument("--resume", action="store_true", help="run only the trials without a record")
    run.add_argument("--dry_run", action="store_true", help="list the trials, start nothing")
    run.add_argument("--max_concurrent_trials", type=int, metavar="N",
                     help="trials at the same time (default: the sweep's max_concurrent_trials)")
    # The driver that `run` starts inside an emulated host: the preflight ran before the cluster came up.
    run.add_argument("--preflight_done", action="store_true", help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "cluster":
        return cli_cluster.run(args)
    if args.command in cli_predict.COMMANDS:
        return cli_predict.run(args)
    if args.command == "export":
        return _export(args.results)
    if getattr(args, "max_concurrent_trials", None) is not None and args.max_concurrent_trials < 1:
        print("error: --max_concurrent_trials must be >= 1", file=sys.stderr)
        return 2
    try:
        sweep = load_sweep(args.sweep)
        if sweep.preflight and not getattr(args, "preflight_done", False):
            from .study.preflight import check_sweep

            check_sweep(sweep, Path.cwd())
    except SweepFileError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.command == "validate" or args.dry_run:
        return _list(sweep)
    return _run(args, sweep)


def _export(results: Path) -> int:
    """``export``: rebuild the tables and plots of ``results``; its exit status."""
    import shlex

    from .results.export import export
    from .study.records import UNWRITABLE, folder_problem

    if not (results / "trials").is_dir():
        print(f"error: {results} has no trials/ folder of trial records", file=sys.stderr)
        return 2
    problem = folder_problem(results)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        written = export(results)
    except OSError as error:
        where = f" ({error.filename})" if error.filename else ""
        print(f"error: could not write the tables of {results}: {error.strerror or error}{where}; the "
              f"trial records are safe in {results / 'trials'}: fix the cause, then run "
              f"`lowprec export {shlex.quote(str(results))}` again", file=sys.stderr)
        return 2 if error.errno in UNWRITABLE else 1
    for path in written.values():
        print(path)
    return 0


def _list(sweep: Sweep) -> int:
    """``validate`` and ``run --dry_run``: the sweep's trials, then the predictor inputs it would run."""
    print(f"{sweep.name}: {len(sweep.trials)} trials from {sweep.path}")
    print(format_trials(sweep.trials))
    measuring = predictor_inputs.predictor_input_trials(sweep.trials) if sweep.predictor_inputs else []
    if measuring:
        print(f"then, on an emulated cluster, {len(measuring)} predictor inputs for the step-time predictions "
              f"(those at {predictor_inputs.SHARING_BANDWIDTH} where its links carry that and trials run one at "
              "a time):")
        print(format_trials(measuring))
    return 0


def _run(args: argparse.Namespace, sweep: Sweep) -> int:
    """``run``: the sweep here, on the cluster at ``--address``, or on an emulated cluster (its own, or the one
    this process runs in); its exit status."""
    from .cluster import emulation
    from .cluster.netns import NetworkError
    from .study.records import folder_problem, in_use

    results = (args.results or _default_results(sweep)).resolve()
    # before an emulated cluster comes up for it
    problem = _job_results_problem(args.results, sweep.name) or in_use(results) or folder_problem(results, sweep.name)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    inside = emulation.current()
    if inside is not None:
        problem = _emulation_problem(sweep, inside, args.max_concurrent_trials)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        return _run_here(args, sweep, results, inside)
    address = args.address or os.environ.get("RAY_ADDRESS")
    if sweep.cluster["emulate"]:
        if args.address:
            print("error: the sweep brings up its own emulated cluster (cluster.emulate); drop --address, or "
                  "drop cluster.emulate to run on the cluster at that address", file=sys.stderr)
            return 2
        try:
            return _run_emulated(args, sweep, results)
        except NetworkError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    cluster = emulation.find(address) if address else None
    if cluster is not None:  # its Ray is reachable from its hosts only
        return _driver_in(cluster, args, results)
    if any(trial["bandwidth"] is not None for trial in sweep.trials):
        print("error: bandwidth shapes the links of an emulated cluster: add cluster: {emulate: {hosts: N}} to "
              "the sweep, or run it with --address of a cluster from `lowprec cluster up`", file=sys.stderr)
        return 2
    return _run_here(args, sweep, results, None)


def _run_here(args: argparse.Namespace, sweep: Sweep, results: Path, inside: Any) -> int:
    """Run the sweep from this process (the driver), inside the emulated cluster ``inside`` or not; 0 where a
    trial of it finished ok."""
    from .study.ray_session import RayUnreachable, import_in_background
    from .study.records import UNWRITABLE
    from .study.runner import ResultsExist, resume_command, run_sweep

    # The tables' modules (pandas: most of a second) load while Ray starts, not before.
    import_in_background(f"{__package__}.results.export")
    try:
        results, unfinished = run_sweep(sweep, results, address=args.address, resume=args.resume,
                                        max_concurrent_trials=args.max_concurrent_trials, emulation=inside,
                                        refresh=_refresh, finish=_finish)
    except ResultsExist as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except RayUnreachable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # the results folder could not be written
        where = f" ({error.filename})" if error.filename else ""
        if error.errno in UNWRITABLE:
            print(f"error: cannot write the results in {results}: {error.strerror or error}{where}", file=sys.stderr)
            return 2
        print(f"error: could not write the results in {results}: {error.strerror or error}{where}; the trials "
              f"recorded so far are safe: fix the cause, then run {resume_command(sweep.path, results)}",
              file=sys.stderr)
        return 1
    _print_outcome(results)
    if unfinished:
        return 1
    return 0 if _any_ok(results, {trial["trial_id"] for trial in sweep.trials}) else 1


def _any_ok(results: Path, grid: set[str]) -> bool:
    """Whether a trial of the sweep finished ok; says so where none did (``run`` then exits 1)."""
    from .study.records import read_records

    if any(record["status"] == "ok" for record in read_records(results) if record["trial_id"] in grid):
        return True
    print("no trial finished ok (exit status 1): their reasons are above and in summary.md", file=sys.stderr)
    return False


def _default_results(sweep: Sweep) -> Path:
    """results/<sweep name>, or the results folder the sweep file is the copy of (`run RESULTS/sweep.yaml
    --resume` from anywhere)."""
    from .study.records import MARKER, folder_sweep

    folder = sweep.path.resolve().parent
    if sweep.path.name == "sweep.yaml" and (folder / MARKER).is_file() and folder_sweep(folder) == sweep.name:
        return folder
    return Path("results") / sweep.name


def _refresh(results: Path) -> None:
    from .results.export import refresh

    refresh(results)


def _finish(results: Path) -> None:
    from .results.export import export_or_warn

    export_or_warn(results)


def _job_results_problem(results: Path | None, name: str) -> str | None:
    """Why ``--results`` will not do when this process is the driver of a ``ray job submit`` job, or None.

    Ray (2.60) starts a job's driver in a temporary copy of ``--working-dir``, which it deletes later, and
    marks it with ``RAY_JOB_CONFIG_JSON_ENV_VAR`` (``RAY_JOB_ID`` is taken out of a driver's environment).
    A relative results folder, the default included, would be written into that copy.
    """
    if not os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):
        return None
    if results is None:
        return (f"--results is required under `ray job submit`, as an absolute path: the default results/{name} "
                f"would be written into the job's temporary copy of --working-dir, which Ray deletes")
    if not results.is_absolute():
        return (f"--results must be an absolute path under `ray job submit`, got {str(results)!r}: a relative one "
                f"would be written into the job's temporary copy of --working-dir, which Ray deletes")
    return None


def _emulation_problem(sweep: Sweep, cluster: Any, max_concurrent_trials: int | None) -> str | None:
    """What keeps the sweep from running on the emulated ``cluster`` (checked before Ray starts)."""
    most = max(trial["num_workers"] for trial in sweep.trials)
    slots = cluster.hosts * cluster.workers_per_host
    if most > slots:
        return (f"num_workers {most} is more than the {slots} workers the emulated cluster holds ({cluster.hosts} "
                f"hosts x {cluster.workers_per_host} workers per host)")
    if len({trial["bandwidth"] for trial in sweep.trials}) > 1 and (max_concurrent_trials or 1) > 1:
        return "bandwidth varies between trials, which run one at a time: drop --max_concurrent_trials"
    from .study.sweep_file import hierarchy_problem

    problem = next(filter(None, (hierarchy_problem(t, cluster.workers_per_host) for t in sweep.trials)), None)
    if problem:
        return problem
    # a rate the links cannot carry would fail mid-sweep, when its trial re-shapes them
    rates = dict.fromkeys(trial["bandwidth"] for trial in sweep.trials if trial["bandwidth"] is not None)
    return next((problem for problem in map(cluster.rate_problem, rates) if problem), None)


def _run_emulated(args: argparse.Namespace, sweep: Sweep, results: Path) -> int:
    """Bring up the sweep's own emulated cluster, run the driver in it, bring it down (also on Ctrl-C or
    when the driver fails; one left by a crash of this process is removed by the next sweep's ``up``)."""
    from .cluster import emulation

    emulate = sweep.cluster["emulate"]
    first = emulate["bandwidth"] or sweep.trials[0]["bandwidth"]
    # SIGTERM (a scheduler, `kill`) must bring the cluster down too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        cluster = emulation.up(emulate["hosts"], first, workers_per_host=emulate["workers_per_host"],
                               prefix=emulation.SWEEP_PREFIX, owner_pid=os.getpid())
        rates = dict.fromkeys(trial["bandwidth"] for trial in sweep.trials if trial["bandwidth"] is not None)
        problem = next(filter(None, map(cluster.rate_problem, rates)), None)
        if problem:  # before any trial: the driver would meet it at that bandwidth's first trial
            print(f"error: {problem}", file=sys.stderr)
            return 1
        return _driver_in(cluster, args, results)
    except KeyboardInterrupt:
        return 1
    except RuntimeError as error:  # NetworkError, a failed calibration
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        # Only a cluster this process brought up: a start refused because another sweep's cluster is up
        # must leave that one running.
        emulation.down(emulation.SWEEP_PREFIX, owner_pid=os.getpid())


def _driver_in(cluster: Any, args: argparse.Namespace, results: Path) -> int:
    """Run this command again as the driver inside the cluster's host 0; its exit status."""
    argv = [sys.executable, "-m", "orchestrator", "run", str(args.sweep.resolve()), "--results", str(results),
            "--address", cluster.address, "--preflight_done"]
    if args.resume:
        argv.append("--resume")
    if args.max_concurrent_trials is not None:
        argv += ["--max_concurrent_trials", str(args.max_concurrent_trials)]
    driver = subprocess.Popen(cluster.command(0, argv))

    def forward(signum: int, frame: Any) -> None:  # SIGTERM: stop the driver as Ctrl-C would
        driver.send_signal(signal.SIGINT)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        return driver.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the driver too (one process group): it records what finished, then exits.
        try:
            driver.wait(timeout=_DRIVER_GRACE_S)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            driver.kill()
            driver.wait()
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _print_outcome(results: Path) -> None:
    """The summary table and where everything is, as the last thing a run prints."""
    summary = results / "summary.md"
    if not any((results / "trials").glob("*.json")):
        print(f"\nno trial has finished yet; results will be in {results}")
        return
    if summary.is_file():
        print()
        print(summary.read_text().rstrip())
    print()
    print(f"results: {results}  (trials.csv, trials.parquet, history.csv, summary.md)")
    plots = sorted((results / "plots").glob("*.png"))
    if plots:
        print(f"plots:   {results / 'plots'}  ({', '.join(p.name for p in plots)})")


if __name__ == "__main__":
    sys.exit(main())
