"""The options of ``lowprec predict`` and ``lowprec advise``, declared once: their parser, their checks, the
docs' options table (docs/predictor.md: ``python -m orchestrator.predict.options``) and the name of the
predictions file all come from ``OPTIONS``.

A refused value exits with status 2 and one line naming the flag, its valid values and what was given.
"""
from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compressors.core.params import NAMES, RATE, RATE_RANGE_BPS, SHAPE, Param, rate_bps

if TYPE_CHECKING:  # the parser is built for every command, and quality's pandas takes most of a second
    from ..study.quality import Quality

# A Param kind beyond compressors.core.params': a time per message, a number with a unit (5us, 0.2ms).
LATENCY = "latency"
MAX_WORKERS = 65_536  # beyond any cluster modelled, and sra's chunks stay cheap to count
_LATENCY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(s|ms|us|ns)")
_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_VALID_LATENCY = "a number with a unit s, ms, us or ns (5us, 0.2ms)"


def latency_s(text: str) -> float:
    """``5us``, ``0.2ms``, ``0s``: seconds; ValueError names the valid form."""
    match = _LATENCY.fullmatch(text.strip().lower())
    if not match:
        raise ValueError(f"latency must be {_VALID_LATENCY}, got {text!r}")
    return float(match.group(1)) * _UNIT[match.group(2)]


def _as_typed(text: str) -> str:
    """A flag's text in a file name: as typed, lower case."""
    return text.strip().lower()


def _workers_part(values: Mapping[str, Any]) -> str:
    """8w; with several workers per host, hosts x workers: 2x8w."""
    n, g = values["num_workers"], values["workers_per_host"]
    return f"{n}w" if g == 1 else f"{n // g}x{g}w"


@dataclass(frozen=True)
class Option:
    """A flag of predict and advise: its setting (name, default, kind, valid range, doc) and how it is written."""
    param: Param
    metavar: str
    unit: str = ""  # what a number counts, named where it is refused: "a number of points"
    divides: str | None = None  # the option whose value this one's must divide: hosts of as many workers each
    advise_only: bool = False
    # its part of the predictions file's name from the options' values ("": none), so that a call for another
    # cluster keeps the file of this one
    name_part: Callable[[Mapping[str, Any]], str] = lambda values: ""


OPTIONS: tuple[Option, ...] = (
    Option(Param("bandwidth", None, RATE, doc="each worker's link to the other hosts, each way: 100mbit, 25gbit "
                                              "(required, unless --link gives it)"),
           "RATE", name_part=lambda values: _as_typed(values["bandwidth"])),
    Option(Param("num_workers", None, int, low=1, high=MAX_WORKERS, doc="workers of the target cluster"), "N",
           name_part=_workers_part),
    Option(Param("workers_per_host", 1, int, low=1,
                 doc="workers on each host, joined by --intra_bandwidth (1: a host per worker). Above 1, every "
                     "configuration measured with sra is predicted with the hierarchical algorithm too"),
           "G", divides="num_workers"),
    # An A100 node's NVLink, 300 GB/s each way; the range: any rate a host's devices could be joined by.
    Option(Param("intra_bandwidth", "2400gbit", RATE, low=8e3, high=1e14,
                 doc="the link between the workers of a host, each way, latency 0 (2400gbit: an A100 node's "
                     "NVLink, 300 GB/s); used where --workers_per_host is above 1"),
           "RATE", name_part=lambda values: "" if values["workers_per_host"] == 1 else
           f"{_as_typed(values['intra_bandwidth'])}-intra"),
    Option(Param("latency", "5us", LATENCY, doc="each message's latency between hosts"), "T",
           name_part=lambda values: _as_typed(values["latency"])),
    # the predictions' file is named by the bandwidth and latency the probe measured
    Option(Param("link", None, str, nullable=True,
                 doc="a probe's file (lowprec cluster probe): the all_reduce bus bandwidth and the latency it "
                     "measured between the nodes, in place of --bandwidth and --latency"), "FILE"),
    Option(Param("overlap", True, bool,
                 doc="true (DDP's way): communication beside backward, an overlapped timeline with the encodes on "
                     "the compute device; false: serial"),
           "true|false", name_part=lambda values: f"overlap-{str(values['overlap']).lower()}"),
    # repr: two different scales never share a file name
    Option(Param("compute_scale", 1.0, float, low=0, low_open=True,
                 doc="how much slower the target's compute, encode and decode are than on the machine that ran "
                     "the one-worker trials (2: half as fast)"),
           "X", name_part=lambda values: "x" + repr(float(values["compute_scale"])).removesuffix(".0")),
    # given, it names the file (a default keeps the names of the predictions made before the option existed)
    Option(Param("overlap_slowdown", None, float, low=0, high=10.0, nullable=True,
                 doc="how much longer the compute device's work takes while communication overlaps it (0.1: a "
                     "tenth longer); default: 0 for CPU trials, 0.189 for GPU trials (communication kernels and "
                     "copies take SMs and memory bandwidth from backward: a published measurement, "
                     "docs/predictor.md), each said in a note; with --overlap true only"),
           "S", name_part=lambda values: "" if values["overlap_slowdown"] is None else
           "slow" + repr(float(values["overlap_slowdown"])).removesuffix(".0")),
    Option(Param("max_accuracy_loss", 0.5, float, low=0,
                 doc="a study judged by accuracy (its target is on test_accuracy): recommend only configurations "
                     "that reached the target with an accuracy at most this many percentage points below fp32's"),
           "POINTS", unit="points", advise_only=True),
    Option(Param("max_loss_increase", 0.05, float, low=0,
                 doc="a study judged by its test loss (its target is on test_loss or test_perplexity): recommend "
                     "only configurations that reached the target with a final test loss at most this many nats "
                     "above fp32's (0.05: a perplexity at most exp(0.05) = 1.05 times fp32's, about what 0.5 "
                     "points are to an accuracy)"),
           "NATS", unit="nats", advise_only=True),
)
# Predicting from a step time (``lowprec predict --model ...``, no results folder: orchestrator.predict.from_step):
# what the user knows of the model and its step on one device of the target. The cluster's options above apply.
DEFAULT_COMPRESSORS = "fp32,fp16,bf16,dynamic8,qsgd,onebit,topk"
STEP_OPTIONS: tuple[Option, ...] = (
    Option(Param("model", None, str, doc="the model, as a sweep names it: a built-in, torchvision:NAME or "
                                         "MODULE:FACTORY (its parameters give the gradient's layout)"), "NAME|REF"),
    Option(Param("model_options", None, dict, nullable=True,
                 doc="keyword options of the model, a YAML mapping: '{depth: 50}'"), "MAPPING"),
    Option(Param("input_shape", None, SHAPE, doc="one sample's shape, comma separated: 3,224,224 (a language "
                                                 "model's: its sequence length)"), "SHAPE"),
    Option(Param("num_classes", 1000, int, low=1, doc="the model's outputs (a language model's: its vocabulary)"),
           "K"),
    Option(Param("batch_size", None, int, low=1, doc="samples per step on each worker"), "B"),
    Option(Param("step_time", None, LATENCY, doc="the model's training step on one device of the target, alone "
                                                 "(forward, backward, optimizer), as its logs show it: 0.25s, 180ms"),
           "T"),
    Option(Param("compressors", DEFAULT_COMPRESSORS, NAMES,
                 doc="the configurations to predict, comma separated, each with its default parameters and "
                     "algorithm (fp32 is always among them)"), "NAMES"),
    Option(Param("codec_table", None, str, nullable=True,
                 doc="the codecs' speeds: a JSON of benchmarks/compressor_bench.py run on the target's device "
                     "(default: measured here and scaled as the step is)"), "FILE"),
    Option(Param("out", None, str, nullable=True, doc="save the predictions here too, as CSV"), "FILE"),
)
_BY_NAME = {option.param.name: option for option in (*OPTIONS, *STEP_OPTIONS)}
# advise's limit on how much worse than fp32 a recommended configuration may end, by the column of trials.csv
# the study is judged by (Quality.delta)
LIMITS = {"accuracy_delta": "max_accuracy_loss", "loss_delta": "max_loss_increase"}


def option(name: str) -> Option:
    """The declaration of option ``--name``."""
    return _BY_NAME[name]


def valid(opt: Option, values: Mapping[str, Any] | None = None) -> str:
    """The valid values of ``opt``, as its refusal and the docs' table state them; ``values``: every option's
    (None: the docs' table, which names the option that bounds this one's rather than its value)."""
    p = opt.param
    if p.kind in (SHAPE, NAMES, str, dict) or (p.kind == RATE and p.low is None):
        return p.describe().removesuffix(" or null")
    if p.kind == RATE:
        return f"a rate from {p.low / 1e3:g}kbit to {p.high / 1e9:g}gbit, like {p.default}"
    if p.kind == LATENCY:
        return _VALID_LATENCY
    if p.kind is bool:
        return "true or false"
    if opt.divides:
        bound = values[opt.divides] if values else opt.divides
        return f"in [{p.low}, {bound}] and divide {opt.divides}" + (f" ({bound})" if values else "")
    interval = f"{'(' if p.low_open else '['}{p.low}, {f'{p.high}]' if p.high is not None else 'inf)'}"
    if p.kind is int:
        return f"in {interval}"
    return f"a number{f' of {opt.unit}' if opt.unit else ''} in {interval}"


def _is_valid(opt: Option, value: Any, values: Mapping[str, Any]) -> bool:
    """Whether ``opt`` takes ``value``; ``values``: every option's (one may bound another)."""
    p = opt.param
    if p.kind == RATE:
        try:
            bps = rate_bps(value)
        except ValueError:
            return False
        low, high = (RATE_RANGE_BPS if p.low is None else (p.low, p.high))
        return low <= bps <= high
    if p.kind == LATENCY:
        try:
            latency_s(value)
        except ValueError:
            return False
        return True
    if opt.divides:
        bound = values[opt.divides]
        return p.low <= value <= bound and bound % value == 0
    return p.problem(value) is None


def problem(opt: Option, values: Mapping[str, Any]) -> str | None:
    """The one line that refuses ``opt``'s value among ``values``, or None."""
    value = values[opt.param.name]
    if value is None and opt.param.default is None and not opt.param.nullable:
        return f"--{opt.param.name} {opt.metavar} is needed"
    if _is_valid(opt, value, values):
        return None
    return f"--{opt.param.name} must be {valid(opt, values)}, got {value!r}"


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """``command``'s options (predict or advise) on ``parser``; each defaults to None, its declared default
    being ``values``' to fill (advise tells a limit given from one not given)."""
    for opt in OPTIONS:
        if opt.advise_only and command != "advise":
            continue
        p = opt.param
        # a rate or a latency stays text, as typed: the file name has it so
        kind: dict[str, Any] = {"type": p.kind} if p.kind in (int, float) else {}
        if p.kind is bool:
            kind = {"choices": ("true", "false")}
        default = "" if p.default is None else f"; default {_default_text(p)}"
        # --bandwidth may come from --link instead: its absence is refused with both named (``from_link``)
        parser.add_argument(f"--{p.name}", default=None, metavar=opt.metavar, help=f"{p.doc}{default}", **kind)


def values(args: argparse.Namespace) -> dict[str, Any]:
    """Every option of the command ``args`` were parsed for, as given or else its default (overlap a bool)."""
    out = {}
    for opt in OPTIONS:
        name = opt.param.name
        if not hasattr(args, name):  # advise's limits, on predict
            continue
        given = getattr(args, name)
        if given is None:
            out[name] = opt.param.default
        else:
            out[name] = given == "true" if opt.param.kind is bool else given
    return out


def add_step_arguments(parser: argparse.ArgumentParser) -> None:
    """predict's options of a prediction from a step time (``STEP_OPTIONS``), as text (``step_values`` reads
    them)."""
    for opt in STEP_OPTIONS:
        p = opt.param
        default = "" if p.default is None else f"; default {_default_text(p)}"
        parser.add_argument(f"--{p.name}", default=None, metavar=opt.metavar, help=f"{p.doc}{default}")


def step_values(args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    """The step options as typed values (text where given, else their defaults), and the one line refusing the
    first that is missing or invalid (None where all are valid)."""
    import yaml

    out: dict[str, Any] = {}
    for opt in STEP_OPTIONS:
        p = opt.param
        text = getattr(args, p.name, None)
        if text is None:
            if p.default is None and not p.nullable:
                return out, f"--{p.name} {opt.metavar} is needed to predict from a step time: {p.doc}"
            out[p.name] = p.default if p.kind != NAMES else p.default.split(",")
            continue
        try:
            value: Any = {SHAPE: lambda t: [int(v) for v in t.split(",")],
                          NAMES: lambda t: [v.strip() for v in t.split(",")],
                          LATENCY: latency_s, int: int,
                          dict: lambda t: yaml.safe_load(t) or {}}.get(p.kind, str)(text)
        except (ValueError, yaml.YAMLError):
            value = None
        bad = value is None or (p.kind == LATENCY and not 0 < value < math.inf) or (
            p.kind != LATENCY and p.problem(value) is not None)
        if bad:
            what = "a time with a unit s, ms, us or ns (0.25s, 180ms), above 0" if p.kind == LATENCY else \
                p.describe().removesuffix(" or null")
            return out, f"--{p.name} must be {what}, got {text!r}"
        out[p.name] = value
    return out, None


def from_link(values: dict[str, Any], latency_given: bool) -> str | None:
    """Where ``--link`` is given, its bandwidth and latency written into ``values`` as the flags would give
    them; the line refusing the file, it beside --bandwidth or --latency (``latency_given``), or no link at all
    (None where all is well)."""
    from .link import read_link

    if values.get("link") is None:
        return None if values["bandwidth"] is not None else "--bandwidth RATE or --link FILE is needed"
    if values["bandwidth"] is not None or latency_given:
        return f"--{'bandwidth' if values['bandwidth'] is not None else 'latency'} and --link both give the link: give one"
    try:
        link = read_link(Path(values["link"]))
    except ValueError as error:
        return str(error)
    low, high = RATE_RANGE_BPS
    if not low <= link.bandwidth_bps <= high:
        return (f"--link {values['link']}: its bandwidth_bps {link.bandwidth_bps:g} is outside the rates the model "
                f"takes, {low / 1e3:g}kbit to {high / 1e9:g}gbit")
    values["bandwidth"] = f"{round(link.bandwidth_bps / 1e3)}kbit"
    values["latency"] = f"{round(link.latency_s * 1e9)}ns"
    return None


def problems(values: Mapping[str, Any]) -> str | None:
    """The first option but advise's limits whose value is refused: the line that says so; None if none is."""
    found = next(filter(None, (problem(opt, values) for opt in OPTIONS if not opt.advise_only)), None)
    if found is None and values.get("overlap_slowdown") is not None and not values["overlap"]:
        return "--overlap_slowdown is for --overlap true: without overlap nothing runs beside the compute"
    return found


def limit(args: argparse.Namespace, judged: Quality, results: Path) -> tuple[float, str | None]:
    """advise's limit for a study ``judged`` so (its flag as given, else its default), and the line that
    refuses it or the other metric's flag (``results``: the folder), or None."""
    own = option(LIMITS[judged.delta])
    wrong = [name for name in LIMITS.values() if name != own.param.name and getattr(args, name) is not None]
    if wrong:
        return math.nan, (f"--{wrong[0]} does not fit {results}, a study judged by its {judged.name} (a "
                          f"{judged.metric} target): give --{own.param.name} {own.metavar} (default "
                          f"{own.param.default:g})")
    given = getattr(args, own.param.name)
    value = own.param.default if given is None else given
    return value, problem(own, {own.param.name: value})


def _default_text(p: Param) -> str:
    if isinstance(p.default, bool):
        return str(p.default).lower()
    return f"{p.default:g}" if isinstance(p.default, float) else str(p.default)


def markdown(options: tuple[Option, ...] = OPTIONS) -> str:
    """The docs' table of ``options`` (docs/predictor.md), generated from their declaration."""
    lines = ["| option | default | valid | meaning |", "|---|---|---|---|"]
    for opt in options:
        p = opt.param
        default = ("none" if p.nullable else "required") if p.default is None else f"`{_default_text(p)}`"
        where = "`advise` only: " if opt.advise_only else ""
        metavar = opt.metavar.replace("|", "\\|")  # a table cell's bar
        lines.append(f"| `--{p.name} {metavar}` | {default} | {valid(opt)} | {where}{p.doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # the docs' two tables: the cluster's options, then those of a step time
    print(markdown(), end="")
    print()
    print(markdown(STEP_OPTIONS), end="")
