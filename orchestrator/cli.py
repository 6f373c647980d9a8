"""Command line: ``lowprec`` / ``python -m orchestrator``.

    validate SWEEP.yaml            check the file, print the trials it expands to (no Ray)
    run SWEEP.yaml [--address ADDR] [--results RESULTS] [--resume] [--dry_run]
                   [--max_concurrent_trials N]
                                   run the sweep on a local Ray, or join ADDR (or RAY_ADDRESS,
                                   as under `ray job submit`); RESULTS: the sweep's results
                                   folder, default results/<sweep name>
    export RESULTS                 rebuild tables and plots from the per-trial records

Flags are spelled as the settings they set, with underscores.

Exit status: 0 done (failed trials are results too), 1 interrupted or a runtime
error, 2 a bad sweep file or usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .config import ConfigError, load_sweep


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
                     help="the sweep's results folder (default: results/<sweep name>); absolute under "
                          "`ray job submit`")
    run.add_argument("--resume", action="store_true", help="run only the trials without a record")
    run.add_argument("--dry_run", action="store_true", help="list the trials, start nothing")
    run.add_argument("--max_concurrent_trials", type=int, metavar="N",
                     help="trials at the same time (default: the sweep's max_concurrent_trials)")
    export = commands.add_parser("export", help="rebuild tables and plots of a results folder")
    export.add_argument("results", type=Path)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "export":
        from .export import export

        if not (args.results / "trials").is_dir():
            print(f"error: {args.results} has no trials/ folder of trial records", file=sys.stderr)
            return 2
        for path in export(args.results).values():
            print(path)
        return 0
    if getattr(args, "max_concurrent_trials", None) is not None and args.max_concurrent_trials < 1:
        print("error: --max_concurrent_trials must be >= 1", file=sys.stderr)
        return 2
    try:
        sweep = load_sweep(args.sweep)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.command == "validate" or args.dry_run:
        print(f"{sweep.name}: {len(sweep.trials)} trials from {sweep.path}")
        print(format_trials(sweep.trials))
        return 0

    from .sweep import ResultsExist, run_sweep

    try:
        results, unfinished = run_sweep(sweep, args.results or Path("results") / sweep.name,
                                        address=args.address, resume=args.resume,
                                        max_concurrent_trials=args.max_concurrent_trials)
    except ResultsExist as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    _print_outcome(results)
    return 1 if unfinished else 0


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
