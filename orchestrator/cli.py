"""Command line: ``lowprec`` / ``python -m orchestrator``.

    validate SWEEP.yaml            check the file, print the trials it expands to (no Ray)
    run SWEEP.yaml [--address ADDR] [--results RESULTS] [--resume] [--dry_run]
                   [--max_concurrent_trials N]
                                   run the sweep on a local Ray, or join ADDR (or RAY_ADDRESS,
                                   as under `ray job submit`); RESULTS: the sweep's results
                                   folder, default results/<sweep name>
    export RESULTS                 rebuild tables and plots from the per-trial records
    predict RESULTS --bandwidth RATE --num_workers N [--latency 5us] [--overlap true|false]
                    [--compute_scale X] [--workers_per_host G] [--intra_bandwidth 2400gbit]
                                   each configuration's step time, speedups and quality change
                                   (accuracy in points, or a loss study's test loss in nats)
                                   on another cluster, from the folder's one-worker trials
                                   (performance model: orchestrator.predict.perfmodel); with G
                                   workers per host, each sra configuration hierarchical too;
                                   caches what it measures here in RESULTS/predict_cache/, writes
                                   RESULTS/predictions/<bandwidth>_<N>w_<latency>_overlap-<true|false>_x<X>.csv
                                   (<N/G>x<G>w_<intra>-intra for <N>w where G > 1)
    advise RESULTS ... (as predict) [--max_accuracy_loss 0.5 | --max_loss_increase 0.05]
                                   the configuration that pays most there among those that reached
                                   the target within that many points of fp32's accuracy (a loss
                                   study: nats of fp32's test loss), and why,
                                   or none; what it left out and why; writes the file predict writes
    cluster up --hosts N --bandwidth RATE [--workers_per_host G] [--prefix P] [--subnet S] [--no_ray]
                                   an emulated cluster on this machine (root): N network
                                   namespaces with links shaped to RATE (100mbit, 1gbit),
                                   calibrated, one Ray node each with G worker slots
                                   (orchestrator.cluster.emulation)
    cluster shape RATE [--calibrate]   re-shape every link while Ray runs
    cluster exec [--prefix P] I CMD...
                                   run CMD in emulated host I (0: where drivers run)
    cluster status | cluster down  its links, calibrations, processes | end it all by PID

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
import dataclasses
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from .study import predictor_inputs
from .study.sweep_file import SweepFileError, Sweep, load_sweep

_DRIVER_GRACE_S = 60.0  # an interrupted driver's time to write its records and tables


def format_trials(trials: list[dict[str, Any]]) -> str:
    """The expanded trials as a fixed-width table: number, trial_id and name (its label)."""
    if not trials:
        return "(no trials)"
    rows = [["#", "trial_id", "name"]] + [[str(i), t["trial_id"], t["name"]] for i, t in enumerate(trials, 1)]
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lowprec", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", help="check a sweep file and list its trials (no Ray)")
    validate.add_argument("sweep", type=Path)
    run = commands.add_parser("run", help="run a sweep on Ray")
    run.add_argument("sweep", type=Path)
    run.add_argument("--address", help="Ray cluster to join (default: RAY_ADDRESS, else a local Ray)")
    run.add_argument("--results", type=Path, default=None,
                     help="the sweep's results folder (default: results/<sweep name>, or the results folder whose "
                          "copy of the sweep file this is); under `ray job submit` "
                          "required, as an absolute path on the node the job's driver runs on")
    run.add_argument("--resume", action="store_true", help="run only the trials without a record")
    run.add_argument("--dry_run", action="store_true", help="list the trials, start nothing")
    run.add_argument("--max_concurrent_trials", type=int, metavar="N",
                     help="trials at the same time (default: the sweep's max_concurrent_trials)")
    # The driver that `run` starts inside an emulated host: the preflight ran before the cluster came up.
    run.add_argument("--preflight_done", action="store_true", help=argparse.SUPPRESS)
    export = commands.add_parser("export", help="rebuild tables and plots of a results folder")
    export.add_argument("results", type=Path)
    for command, text in (("predict", "predict each configuration's step time on another cluster"),
                          ("advise", "name the configuration that pays most on another cluster")):
        sub = commands.add_parser(command, help=text)
        sub.add_argument("results", type=Path)
        sub.add_argument("--bandwidth", required=True,
                         help="each worker's link to the other hosts, each way, e.g. 25gbit, 100mbit")
        sub.add_argument("--num_workers", type=int, required=True)
        sub.add_argument("--workers_per_host", type=int, default=1, metavar="G",
                         help="workers on each host, joined by --intra_bandwidth; it divides --num_workers "
                              "(default 1: a host per worker). Above 1, each sra configuration is predicted with "
                              "the hierarchical algorithm too")
        sub.add_argument("--intra_bandwidth", default="2400gbit", metavar="RATE",
                         help="the link between the workers of a host, each way, latency 0 (default 2400gbit: "
                              "an A100 node's NVLink, 300 GB/s); used where --workers_per_host is above 1")
        sub.add_argument("--latency", default="5us", help="per message, e.g. 5us, 0.2ms (default 5us)")
        sub.add_argument("--overlap", default="true", choices=("true", "false"),
                         help="communication beside backward, as DDP does (default true)")
        sub.add_argument("--compute_scale", type=float, default=1.0,
                         help="the target's compute, encode and decode time against the machine that ran "
                              "the one-worker trials (2: half as fast; default 1)")
        if command == "advise":  # the limit in the unit of what the study is judged by (its target's metric)
            sub.add_argument("--max_accuracy_loss", type=float, metavar="POINTS",
                             help="a study judged by accuracy (its target is on test_accuracy): recommend only "
                                  "configurations that reached the target with an accuracy at most this many "
                                  "percentage points below fp32's (default 0.5)")
            sub.add_argument("--max_loss_increase", type=float, metavar="NATS",
                             help="a study judged by its test loss (its target is on test_loss or test_perplexity): "
                                  "recommend only configurations that reached the target with a final test loss at "
                                  "most this many nats above fp32's (default 0.05: a perplexity at most exp(0.05) = "
                                  "1.05 times fp32's, about what 0.5 points are to an accuracy)")
    cluster = commands.add_parser("cluster", help="an emulated cluster on this machine (root)")
    actions = cluster.add_subparsers(dest="action", required=True)
    from .cluster.emulation import DEFAULT_PREFIX, DEFAULT_SUBNET, MAX_WORKERS_PER_HOST

    def with_prefix(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--prefix", default=DEFAULT_PREFIX, help=f"names the namespaces (default {DEFAULT_PREFIX})")
        return sub

    up = with_prefix(actions.add_parser("up", help="make the hosts, shape and calibrate the links, start Ray"))
    up.add_argument("--hosts", type=int, required=True, help="emulated hosts (network namespaces), 2 to 64")
    up.add_argument("--bandwidth", required=True, help="each link's rate each way, as tc writes it, from 8kbit to "
                                                        "100gbit: 100mbit, 1gbit")
    up.add_argument("--workers_per_host", type=int, default=1, metavar="G",
                    help=f"workers of a trial one host may hold, 1 to {MAX_WORKERS_PER_HOST} (default 1)")
    up.add_argument("--subnet", default=DEFAULT_SUBNET, help=f"first three octets in 198.18.0.0/15 "
                                                             f"(default {DEFAULT_SUBNET})")
    up.add_argument("--no_ray", action="store_true", help="the network only")
    shape = with_prefix(actions.add_parser("shape", help="re-shape every link (Ray keeps running)"))
    shape.add_argument("bandwidth", metavar="RATE")
    shape.add_argument("--calibrate", action="store_true", help="measure the new rate (a few seconds)")
    run_in = with_prefix(actions.add_parser(
        "exec", help="run a command in emulated host I", usage="lowprec cluster exec [--prefix P] I CMD [ARG ...]",
        description="exec's options go before I; everything from CMD on is CMD's (a --prefix there is refused)"))
    run_in.add_argument("host", type=int, metavar="I")
    run_in.add_argument("argv", nargs=argparse.REMAINDER, metavar="CMD")
    with_prefix(actions.add_parser("status", help="hosts, links, calibrations, processes"))
    with_prefix(actions.add_parser("down", help="end every process of the cluster by PID, remove its namespaces"))
    return parser


def _cluster(args: argparse.Namespace) -> int:
    """The cluster verbs: bad input exits 2 before anything changes, a failure while acting exits 1."""
    from .cluster import emulation, netns
    from .study.settings import EMULATE

    def usage(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return 2

    if args.action == "exec":
        if not args.argv:
            return usage("cluster exec needs a command: lowprec cluster exec [--prefix P] I CMD [ARG ...]")
        # Everything from CMD on is CMD's: a --prefix there was meant for exec as often as for CMD.
        if any(arg == "--prefix" or arg.startswith("--prefix=") for arg in args.argv):
            return usage("--prefix after the host number is refused: exec's options go before it "
                         "(lowprec cluster exec --prefix P I CMD ...); to give CMD a --prefix of its own, run it "
                         "through a shell (lowprec cluster exec I sh -c 'CMD --prefix ...')")
    problems = [("--prefix", args.prefix, netns.prefix_problem(args.prefix))]
    if args.action == "up":
        emulate = {param.name: param for param in EMULATE}  # as a sweep's cluster.emulate
        problems += [("--hosts", args.hosts, emulate["hosts"].problem(args.hosts)),
                     ("--workers_per_host", args.workers_per_host,
                      emulate["workers_per_host"].problem(args.workers_per_host)),
                     ("--bandwidth", args.bandwidth, emulation.BANDWIDTH.problem(args.bandwidth)),
                     ("--subnet", args.subnet, netns.subnet_problem(args.subnet))]
    if args.action == "shape":
        problems.append(("RATE", args.bandwidth, emulation.BANDWIDTH.problem(args.bandwidth)))
    for flag, value, problem in problems:
        if problem:
            return usage(f"{flag} {problem}, got {value!r}")
    try:
        if args.action == "up":
            cluster = emulation.up(args.hosts, args.bandwidth, workers_per_host=args.workers_per_host,
                                   prefix=args.prefix, subnet=args.subnet, ray=not args.no_ray)
            if cluster.ray:
                print(f"driver: lowprec run SWEEP --address {cluster.address}   (or: lowprec cluster exec 0 CMD)")
            return 0
        if args.action == "down":
            if emulation.down(args.prefix) is None:
                print(f"no emulated cluster with prefix {args.prefix!r}: nothing to bring down")
            return 0
        cluster = emulation.load(args.prefix)
        if args.action == "status":
            print(emulation.status(args.prefix))
            return 0 if cluster else 1
        if cluster is None:
            print(f"error: no emulated cluster with prefix {args.prefix!r}: `lowprec cluster up --prefix "
                  f"{args.prefix}` first", file=sys.stderr)
            return 1
        if args.action == "shape":
            found = cluster.shape(args.bandwidth, recalibrate=args.calibrate, log=print)
            print(f"links: {cluster.bandwidth} each way" + (f"; calibrated {emulation.rate_text(found['measured_bps'])}"
                                                           if found and args.calibrate else ""))
            return 0
        if not 0 <= args.host < cluster.hosts:
            return usage(f"I must be a host of the cluster {args.prefix!r}, in [0, {cluster.hosts - 1}], "
                         f"got {args.host}")
        return subprocess.call(cluster.command(args.host, args.argv))
    except (RuntimeError, OSError, ValueError) as error:  # NetworkError, a failed calibration, a state file
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 1


def _predict(args: argparse.Namespace) -> int:
    from compressors.core.params import rate_bps

    from .predict import predictor
    from .study.settings import param

    problem = dataclasses.replace(param("bandwidth"), nullable=False).problem(args.bandwidth)  # a rate, not null
    if problem:
        print(f"error: --bandwidth {problem}, got {args.bandwidth!r}", file=sys.stderr)
        return 2
    if not 1 <= args.num_workers <= predictor.MAX_WORKERS:
        print(f"error: --num_workers must be in [1, {predictor.MAX_WORKERS}], got {args.num_workers}", file=sys.stderr)
        return 2
    try:
        intra = rate_bps(args.intra_bandwidth)
    except ValueError:
        intra = math.nan
    low, high = predictor.INTRA_RATE_RANGE_BPS
    if not low <= intra <= high:
        print(f"error: --intra_bandwidth must be a rate from {low / 1e3:g}kbit to {high / 1e9:g}gbit, like 2400gbit, "
              f"got {args.intra_bandwidth!r}", file=sys.stderr)
        return 2
    if not (math.isfinite(args.compute_scale) and args.compute_scale > 0):
        print(f"error: --compute_scale must be a number in (0, inf), got {args.compute_scale}", file=sys.stderr)
        return 2
    try:
        latency = predictor.latency_s(args.latency)
    except ValueError as error:
        print(f"error: --{error}", file=sys.stderr)
        return 2
    try:  # the hosts hold G workers each
        predictor.cluster(args.num_workers, args.workers_per_host, rate_bps(args.bandwidth), latency, intra)
    except ValueError as error:
        print(f"error: --{error}", file=sys.stderr)
        return 2
    if not (args.results / "trials.csv").is_file():
        what = "is not a folder" if args.results.exists() and not args.results.is_dir() else "has no trials.csv"
        print(f"error: {args.results} {what} (a results folder of `lowprec run`)", file=sys.stderr)
        return 2
    from .study.records import read_records

    # what the study is judged by, from its targets (predict warns of a record that cannot be read)
    judged = predictor.judged_by(read_records(args.results, warn=lambda _: None))
    max_loss = 0.0
    if args.command == "advise":  # its limit: the flag of the study's unit, no other
        own, default = predictor.LIMIT_FLAGS[judged.delta]
        wrong = [flag for flag, _ in predictor.LIMIT_FLAGS.values() if flag != own and getattr(args, flag) is not None]
        if wrong:
            print(f"error: --{wrong[0]} does not fit {args.results}, a study judged by its {judged.name} (a "
                  f"{judged.metric} target): give --{own} {judged.unit.upper()} (default {default:g})",
                  file=sys.stderr)
            return 2
        max_loss = default if getattr(args, own) is None else getattr(args, own)
        if not (math.isfinite(max_loss) and max_loss >= 0):
            print(f"error: --{own} must be a number of {judged.unit} in [0, inf), got {max_loss}", file=sys.stderr)
            return 2
    overlap = args.overlap == "true"
    path = predictor.predictions_path(args.results, args.bandwidth, args.num_workers, args.latency, overlap,
                                      args.compute_scale, args.workers_per_host, args.intra_bandwidth)
    try:  # before the work: a table that cannot be saved is not worth computing
        predictor.check_writable(path)
    except OSError as error:
        print(f"error: the predictions cannot be saved in {path}: {error.strerror or error}", file=sys.stderr)
        return 2
    try:
        table, notes = predictor.predict(args.results, rate_bps(args.bandwidth), args.num_workers, latency,
                                         overlap=overlap, compute_scale=args.compute_scale,
                                         workers_per_host=args.workers_per_host, intra_bandwidth_bps=intra)
    except (OSError, ValueError) as error:  # OSError: the model's data could not be read here
        print(f"error: {error}", file=sys.stderr)
        return 1
    hosts = "" if args.workers_per_host == 1 else (f" ({args.num_workers // args.workers_per_host} hosts x "
                                                    f"{args.workers_per_host}, {args.intra_bandwidth} inside one)")
    print(f"{args.num_workers} workers{hosts}, {args.bandwidth} links, {args.latency} latency, overlap {args.overlap}, "
          f"compute x{args.compute_scale:g} (orchestrator.predict.perfmodel)")
    shown = table[["configuration", "predicted_step_time_s", "comm_s", "speedup_vs_fp32", "speedup_vs_16bit",
                   "tta_speedup_vs_fp32", predictor.delta_column(judged), "reached_target", "break_even_bps"]]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for note in notes:
        print(note)
    if args.command == "advise":
        print(predictor.advice(table, max_loss, judged))
    try:
        predictor.write_atomic(path, table.to_csv(index=False))
    except OSError as error:
        print(f"error: could not save the predictions in {path}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(f"saved {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "cluster":
        return _cluster(args)
    if args.command in ("predict", "advise"):
        return _predict(args)
    if args.command == "export":
        import shlex

        from .results.export import export
        from .study.records import UNWRITABLE, folder_problem

        if not (args.results / "trials").is_dir():
            print(f"error: {args.results} has no trials/ folder of trial records", file=sys.stderr)
            return 2
        problem = folder_problem(args.results)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        try:
            written = export(args.results)
        except OSError as error:
            where = f" ({error.filename})" if error.filename else ""
            print(f"error: could not write the tables of {args.results}: {error.strerror or error}{where}; the "
                  f"trial records are safe in {args.results / 'trials'}: fix the cause, then run "
                  f"`lowprec export {shlex.quote(str(args.results))}` again", file=sys.stderr)
            return 2 if error.errno in UNWRITABLE else 1
        for path in written.values():
            print(path)
        return 0
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
        print(f"{sweep.name}: {len(sweep.trials)} trials from {sweep.path}")
        print(format_trials(sweep.trials))
        measuring = predictor_inputs.predictor_input_trials(sweep.trials) if sweep.predictor_inputs else []
        if measuring:
            print(f"then, on an emulated cluster, {len(measuring)} predictor inputs for the step-time predictions "
                  f"(those at {predictor_inputs.SHARING_BANDWIDTH} where its links carry that and trials run one at "
                  "a time):")
            print(format_trials(measuring))
        return 0
    problem = _job_results_problem(args.results, sweep.name)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2

    from .cluster import emulation
    from .cluster.netns import NetworkError
    from .study.records import UNWRITABLE, folder_problem, in_use

    results = (args.results or _default_results(sweep)).resolve()
    problem = in_use(results) or folder_problem(results, sweep.name)  # before an emulated cluster comes up for it
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    inside = emulation.current()
    if inside is None:
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
    else:
        problem = _emulation_problem(sweep, inside, args.max_concurrent_trials)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2

    from .study.runner import RayUnreachable, ResultsExist, import_in_background, resume_command, run_sweep

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
