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
        if command == "predict":  # or from a step time, without a folder (orchestrator.predict.from_step)
            sub.add_argument("results", type=Path, nargs="?", help="a results folder of lowprec run; without "
                             "one, predict from --model, --input_shape, --batch_size and --step_time")
            options.add_arguments(sub, command)
            options.add_step_arguments(sub)
        else:
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
    given = values["overlap_slowdown"]
    slowed = f" (device work {1 + given:g}x as long beside it)" if given else ""
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
    problem = options.from_link(values, latency_given=args.latency is not None)
    if problem:
        return _usage(problem)
    if args.command == "predict" and args.results is None:
        return _run_from_step(args, values)
    given = [opt.param.name for opt in options.STEP_OPTIONS if getattr(args, opt.param.name, None) is not None]
    if given:
        return _usage(f"--{given[0]} is for a prediction from a step time, without a results folder; "
                      f"{args.results} is one")
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


def _run_from_step(args: argparse.Namespace, values: dict[str, Any]) -> int:
    """predict without a results folder: from the model, its batch and its step time on one device
    (``orchestrator.predict.from_step``); 2 for a refused option, 1 where the model cannot be built here or
    the table cannot be saved."""
    from compressors.core.params import rate_bps

    from .predict import advice, from_step, options
    from .predict.outcomes import ACCURACY
    from .predict.plan import cluster
    from .study.records import write_atomic

    if args.compute_scale is not None:
        return _usage("--compute_scale is for a results folder (its trials' machine against the target's): "
                      "--step_time is the target's own")
    step, problem = options.step_values(args)
    problem = problem or options.problems(values) or next(
        filter(None, map(from_step.compressor_problem, step["compressors"])), None)
    if problem:
        return _usage(problem)
    table_path = Path(step["codec_table"]) if step["codec_table"] else None
    if table_path is not None and not table_path.is_file():
        return _usage(f"--codec_table {table_path} is not a file")
    model = from_step.Model(step["model"], step["model_options"] or {}, tuple(step["input_shape"]),
                            step["num_classes"], step["batch_size"])
    target = cluster(values["num_workers"], values["workers_per_host"], rate_bps(values["bandwidth"]),
                     options.latency_s(values["latency"]), rate_bps(values["intra_bandwidth"]))
    try:
        table, notes = from_step.predict_from_step(model, step["step_time"], step["compressors"], target,
                                                   values["overlap"], values["overlap_slowdown"], table_path)
    except (OSError, ValueError, RuntimeError) as error:  # the model cannot be built or run on its batch here
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
        return 1
    print(_heading(values) + f"; {model.name}, batch {model.batch_size}, one device's step {args.step_time}")
    print(advice.table_text(table, ACCURACY))
    for note in notes:
        print(note)
    if step["out"]:
        try:
            write_atomic(Path(step["out"]), table.to_csv(index=False))
        except OSError as error:
            print(f"error: could not save the predictions in {step['out']}: {error.strerror or error}",
                  file=sys.stderr)
            return 1
        print(f"saved {step['out']}")
    return 0
