"""What compression costs a training step: each compressor's encode and decode beside the step's compute.

    python -m benchmarks.step_costs --json PATH [--device cpu|cuda] [--models resnet50,gpt2]
                                    [--compressors fp32,qsgd,...] [--steps 10] [--size full|small]
                                    [--budget-s SECONDS]

One worker, no Ray: the training loop (``orchestrator.study.train_loop.train``, a one-process group
over NCCL on a GPU, gloo on the CPU, DDP with the compressor's hook) for each model and each
compressor with its default parameters (PowerSGD too), ``--steps`` steps of SGD on synthetic data,
with overlap off, so that the hook's encode and decode are timed apart from backward's kernels. Per
run, the median step's time and its parts as the training loop measures them (``step_time_s``,
``compute_s``, ``exposed_comm_s``, ``encode_s``, ``comm_s``, ``decode_s``: orchestrator.study.columns);
with one worker the collectives move nothing, so encode and decode, and the exposed communication
as a whole, are the device's cost of the method. The models, at ``--size full``:

- resnet50: ResNet-50 (25.6 M parameters) on 3x224x224 images of 1000 classes, batch 32;
- gpt2: GPT-2 small's shape (12 layers, 12 heads, width 768, 1024 tokens, a vocabulary of 50257
  tokens) on random tokens, batch 8.

``--size small`` is a dry run on a CPU: ResNet-50 itself on 3x32x32 images of 10 classes, batch 4,
and a GPT of 2 layers, width 64, 64 tokens of the same vocabulary, batch 2. Prints a table and, with ``--json PATH``, saves it after every run (written to a temporary
file and renamed) with the machine's description. ``--budget-s`` starts no run after that many
seconds; the JSON says how many were not made. A run that raises is recorded with its error and the
next one goes on; the exit status is then 1.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import compressors
from orchestrator.study import train_loop

from . import record as record_

GPT2_VOCAB = 50257
PARTS = ("step_time_s", "compute_s", "exposed_comm_s", "encode_s", "comm_s", "decode_s")
# Each model's training-loop settings at each size; the gpt runs add their token files' folder.
MODELS: dict[str, dict[str, dict[str, Any]]] = {
    "resnet50": {
        "full": {"model": "resnet50", "dataset": "synthetic", "input_shape": [3, 224, 224], "num_classes": 1000,
                 "batch_size": 32},
        "small": {"model": "resnet50", "dataset": "synthetic", "input_shape": [3, 32, 32], "num_classes": 10,
                  "batch_size": 4},
    },
    "gpt2": {
        "full": {"model": "gpt", "dataset": "tokens", "n_layer": 12, "n_head": 12, "n_embd": 768,
                 "seq_len": 1024, "vocab_size": GPT2_VOCAB, "batch_size": 8},
        "small": {"model": "gpt", "dataset": "tokens", "n_layer": 2, "n_head": 2, "n_embd": 64, "seq_len": 64,
                  "vocab_size": GPT2_VOCAB, "batch_size": 2},
    },
}


def write_tokens(folder: Path, seq_len: int, windows: int, seed: int = 0) -> None:
    """nanoGPT's train.bin and val.bin of random token ids below GPT-2's vocabulary: ``windows``
    training sequences of ``seq_len`` tokens, and one to test on."""
    rng = np.random.default_rng(seed)
    for name, count in (("train.bin", windows), ("val.bin", 1)):
        rng.integers(0, GPT2_VOCAB, count * seq_len + 1, dtype=np.uint16).tofile(folder / name)


def settings_for(model: str, size: str, compressor: str, steps: int, use_gpu: bool, data_dir: Path) -> dict[str, Any]:
    """The training loop's settings for one run: ``steps`` steps, then a test on one batch."""
    workload = dict(MODELS[model][size])
    batch = workload["batch_size"]
    if workload["dataset"] == "synthetic":
        workload.update(num_samples=batch * steps, test_samples=batch)
    else:
        workload.update(data_dir=str(data_dir), dropout=0.0)
    return {**workload, "compressor": compressor, "epochs": 1, "max_steps_per_epoch": steps, "optimizer": "sgd",
            "lr": 0.001, "overlap": False, "use_gpu": use_gpu, "seed": 0}


def run_one(model: str, compressor: str, config: dict[str, Any]) -> dict[str, Any]:
    """One run's row: its status, the model's size and the median step's parts; an error as its message."""
    row: dict[str, Any] = {"model": model, "compressor": compressor}
    try:
        result = train_loop.train(config)
    except Exception as error:  # recorded; the next run goes on
        return {**row, "status": "failed", "reason": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    final = result["final"]
    # A part no step measured (plain DDP's comm_s) is NaN there: null here, as JSON has no NaN.
    parts = {part: final.get(part) if math.isfinite(final.get(part, math.nan)) else None for part in PARTS}
    return {**row, "status": result["status"], "reason": result["reason"],
            "parameters": result["model_summary"]["parameters"], **parts}


def _ms(value: Any) -> str:
    return f"{1e3 * value:9.2f}" if isinstance(value, float) and math.isfinite(value) else f"{'-':>9}"


def format_table(rows: list[dict[str, Any]]) -> str:
    """The runs in milliseconds per step. ``hook``: the exposed communication, which with one worker is
    the hook's device work (the casts and PowerSGD time theirs only as a whole, not as encode and decode)."""
    head = (f"{'model':<9} {'compressor':<11} {'step ms':>9} {'compute':>9} {'encode':>9} {'decode':>9} "
            f"{'hook':>9} {'hook/compute':>12}  status")
    lines = [head, "-" * len(head)]
    for r in rows:
        share = r["exposed_comm_s"] / r["compute_s"] if r.get("compute_s") and r.get("exposed_comm_s") is not None \
            else None
        lines.append(f"{r['model']:<9} {r['compressor']:<11} {_ms(r.get('step_time_s'))} {_ms(r.get('compute_s'))} "
                     f"{_ms(r.get('encode_s'))} {_ms(r.get('decode_s'))} {_ms(r.get('exposed_comm_s'))} "
                     f"{'-' if share is None else f'{share:.3f}':>12}  "
                     f"{r['status']}{' (' + r['reason'] + ')' if r.get('reason') else ''}")
    return "\n".join(lines)


# The methods a DDP hook runs (an optimizer method, 1-bit Adam, takes Adam's steps itself).
HOOKED = tuple(name for name in compressors.NAMES if not compressors.registry.optimizer_method(name))


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.step_costs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, metavar="PATH", help="save the table and the machine's description here")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma separated, of {', '.join(MODELS)}")
    ap.add_argument("--compressors", default=",".join(HOOKED), help="comma separated (default: all)")
    ap.add_argument("--steps", type=int, default=10, help="training steps per run (their median is reported)")
    ap.add_argument("--size", choices=("full", "small"), default="full")
    record_.add_options(ap)
    args = ap.parse_args(argv)
    args.models = record_.subset(ap, "--models", args.models, MODELS)
    args.compressors = record_.subset(ap, "--compressors", args.compressors, HOOKED)
    if not 1 <= args.steps <= 1000:
        ap.error(f"--steps: an integer in [1, 1000] expected, got {args.steps}")
    record_.check_options(ap, args)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    stop_at = record_.deadline(args.budget_s)
    record: dict[str, Any] = {**record_.header("benchmarks.step_costs", argv, args), "rows": []}
    planned = [(m, c) for m in args.models for c in args.compressors]

    def save() -> None:
        record["not_measured"] = len(planned) - len(record["rows"])
        record_.save(record, args.json)

    with tempfile.TemporaryDirectory() as scratch:
        data_dir = Path(scratch)
        gpt = MODELS["gpt2"][args.size]
        write_tokens(data_dir, gpt["seq_len"], gpt["batch_size"] * args.steps)
        for model, compressor in planned:
            if record_.past(stop_at):
                break
            print(f"  {model} {compressor} ...", file=sys.stderr, flush=True)
            config = settings_for(model, args.size, compressor, args.steps, args.device == "cuda", data_dir)
            record["rows"].append(run_one(model, compressor, config))
            save()
    save()
    print(format_table(record["rows"]), flush=True)
    record_.print_ending(record, len(planned), "runs", args.budget_s, args.json)
    return 1 if any(r["status"] == "failed" for r in record["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
