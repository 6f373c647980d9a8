"""``lowprec cluster``: an emulated cluster on this machine (``orchestrator.cluster.emulation``), its parser
and its verbs. Bad input exits 2 before anything changes, a failure while acting exits 1."""
from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable


def add_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """The cluster command and its verbs, made by ``add`` (the command line's subparsers)."""
    from .cluster.emulation import DEFAULT_PREFIX, DEFAULT_SUBNET, MAX_WORKERS_PER_HOST

    actions = add("cluster", help="an emulated cluster on this machine (root)").add_subparsers(
        dest="action", required=True)

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
    from .cluster.probe import BACKENDS

    probe = actions.add_parser("probe", help="measure a real Ray cluster's links between nodes: all_reduce and "
                                             "all_gather bus bandwidth and latency (lowprec predict --link FILE)")
    probe.add_argument("--address", required=True, help="the Ray cluster (ray://host:10001 or host:6379)")
    probe.add_argument("--out", required=True, help="the probe's JSON file, for predict --link")
    probe.add_argument("--backend", default="gloo", choices=BACKENDS, help="the trials' backend (default gloo; nccl: "
                                                                           "a GPU on each node)")
    probe.add_argument("--nodes", type=int, default=None, help="nodes to probe, a rank on each (default: all)")
    probe.add_argument("--sizes_mib", default="1,16,64", help="all_reduce and all_gather sizes a rank, MiB (default "
                                                              "1,16,64)")
    probe.add_argument("--repeats", type=int, default=5, help="timed repeats of each, the median taken (default 5)")
    with_prefix(actions.add_parser("down", help="end every process of the cluster by PID, remove its namespaces"))


def _usage(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _input_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the verb's arguments (the line that says so), or None."""
    from .cluster import emulation, netns
    from .study.settings import EMULATE

    if args.action == "exec":
        if not args.argv:
            return "cluster exec needs a command: lowprec cluster exec [--prefix P] I CMD [ARG ...]"
        # Everything from CMD on is CMD's: a --prefix there was meant for exec as often as for CMD.
        if any(arg == "--prefix" or arg.startswith("--prefix=") for arg in args.argv):
            return ("--prefix after the host number is refused: exec's options go before it "
                    "(lowprec cluster exec --prefix P I CMD ...); to give CMD a --prefix of its own, run it "
                    "through a shell (lowprec cluster exec I sh -c 'CMD --prefix ...')")
    if args.action == "probe":
        return _probe_problem(args)
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
    return next((f"{flag} {problem}, got {value!r}" for flag, value, problem in problems if problem), None)


def _probe_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with probe's arguments, or None."""
    try:
        sizes = [float(v) for v in args.sizes_mib.split(",")]
    except ValueError:
        sizes = []
    if not sizes or not all(0 < v <= 4096 for v in sizes):
        return f"--sizes_mib must be sizes in (0, 4096] MiB, comma separated, got {args.sizes_mib!r}"
    if not 1 <= args.repeats <= 1000:
        return f"--repeats must be in [1, 1000], got {args.repeats}"
    if args.nodes is not None and args.nodes < 2:
        return f"--nodes must be at least 2, got {args.nodes}"
    return None


def run(args: argparse.Namespace) -> int:
    """The cluster verb of ``args``: its exit status."""
    problem = _input_problem(args)
    if problem:
        return _usage(problem)
    try:
        return _act(args)
    except (RuntimeError, OSError, ValueError) as error:  # NetworkError, a failed calibration, a state file
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 1


def _act(args: argparse.Namespace) -> int:
    """Carry out the verb of checked ``args``."""
    if args.action == "probe":
        return _probe(args)
    from .cluster import emulation

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
        return _usage(f"I must be a host of the cluster {args.prefix!r}, in [0, {cluster.hosts - 1}], got {args.host}")
    return subprocess.call(cluster.command(args.host, args.argv))


def _probe(args: argparse.Namespace) -> int:
    """Probe the Ray cluster at ``--address`` and write its file (through a temporary file and a rename)."""
    import json
    from pathlib import Path

    from .cluster.probe import probe
    from .study.records import write_atomic

    sizes = tuple(int(float(v) * (1 << 20)) // 4 * 4 for v in args.sizes_mib.split(","))
    found = probe(args.address, args.nodes, args.backend, sizes, args.repeats)
    write_atomic(Path(args.out), json.dumps(found, indent=1) + "\n")
    gbit = found["bandwidth_bps"] / 1e9
    print(f"{len(found['nodes'])} nodes, {args.backend}: all_reduce bus bandwidth {gbit:.3g} Gbit/s, latency "
          f"{found['latency_s'] * 1e6:.3g} us a message; saved {args.out} (lowprec predict --link {args.out})")
    return 0
