"""``lowprec predict`` and ``lowprec advise``: their parsers, from the options' one declaration
(``orchestrator.predict.options``), and what they run (``orchestrator.predict.predictor``)."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

COMMANDS = {"predict": "predict each configuration's step time on another cluster",
            "advise": "name the configuration that pays most on another cluster"}


def add_parsers(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    """predict's and advise's parsers, made by ``add_parser`` (the command line's subparsers)."""
    from .predict import options

    for command, text in COMMANDS.items():
        sub = add_parser(command, help=text, description=text)
        sub.add_argument("results", type=Path, help="a results folder of lowprec run")
        options.add_arguments(sub, command)


def _usage(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _folder_problem(results: Path) -> str | None:
    """Why ``results`` is not a results folder to predict, or None."""
    if (results / "trials.csv").is_file():
        return None
    what = "is not a folder" if results.exists() and not results.is_dir() else "has no trials.csv"
    return f"{results} {what} (a results folder of `lowprec run`)"


def _heading(values: Mapping[str, Any]) -> str:
    """The line above predict's table: the cluster, as the options were given."""
    n, g = values["num_workers"], values["workers_per_host"]
    hosts = "" if g == 1 else f" ({n // g} hosts x {g}, {values['intra_bandwidth']} inside one)"
    slowed = f" (device work {1 + values['overlap_slowdown']:g}x as long beside it)" if values["overlap_slowdown"] else ""
    return (f"{n} workers{hosts}, {values['bandwidth']} links, {values['latency']} latency, overlap "
            f"{str(values['overlap']).lower()}{slowed}, compute x{values['compute_scale']:g} "
            "(orchestrator.predict.perfmodel)")


def run(args: argparse.Namespace) -> int:
    """predict or advise (``args.command``): 2 for a refused option or folder, found before any work; 1 where
    the folder cannot be predicted or the table cannot be saved."""
    from compressors.core.params import rate_bps

    from .predict import advice, files, options, outcomes, predictor
    from .study.records import read_records, write_atomic

    values = options.values(args)
    problem = options.problems(values) or _folder_problem(args.results)
    if problem:
        return _usage(problem)
    # what the study is judged by, from its targets (predict warns of a record that cannot be read)
    judged = outcomes.judged_by(read_records(args.results, warn=lambda _: None))
    max_loss, problem = options.limit(args, judged, args.results) if args.command == "advise" else (0.0, None)
    if problem:
        return _usage(problem)
    path = files.predictions_path(args.results, values)
    try:  # before the work: a table that cannot be saved is not worth computing
        files.check_writable(path)
    except OSError as error:
        return _usage(f"the predictions cannot be saved in {path}: {error.strerror or error}")
    try:
        table, notes = predictor.predict(args.results, rate_bps(values["bandwidth"]), values["num_workers"],
                                         options.latency_s(values["latency"]), overlap=values["overlap"],
                                         compute_scale=values["compute_scale"],
                                         workers_per_host=values["workers_per_host"],
                                         intra_bandwidth_bps=rate_bps(values["intra_bandwidth"]),
                                         overlap_slowdown=values["overlap_slowdown"])
    except (OSError, ValueError) as error:  # OSError: the model's data could not be read here
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(_heading(values))
    print(advice.table_text(table, judged))
    for note in notes:
        print(note)
    if args.command == "advise":
        print(advice.advice(table, max_loss, judged))
    try:
        write_atomic(path, table.to_csv(index=False))
    except OSError as error:
        print(f"error: could not save the predictions in {path}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(f"saved {path}")
    return 0
