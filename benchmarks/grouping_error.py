"""Relative error of onebit and adaptive per grouping, on real gradients.

    python -m benchmarks.grouping_error [--steps 50] [--measure 10] [--batch_size 128] [--lr 0.05]
                                        [--seed 0] [--json PATH]

The quickstart model (``mlp``, width 256, depth 2: weights (256, 784), (256, 256),
(10, 256)) is trained on the bundled MNIST split with plain SGD (momentum 0.9) for
``--steps`` steps; over the next ``--measure`` steps each gradient of the first and the
last layer's weight is encoded and decoded once (no error feedback: the error of one
step, ``||decode(encode(g)) - g|| / ||g||``) by ``onebit`` and by ``adaptive`` (pi 0.01),
with ``grouping`` ``column`` (the papers': per input unit) and ``row`` (per output unit).
The table gives the mean over the measured steps; the torch threads are those torch
starts with. With ``--json PATH`` it is saved with the machine's description.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
import statistics
from typing import Any

import torch
import torch.nn.functional as F

import compressors
import workloads
from orchestrator.study import env_info

METHODS = (("onebit", {}), ("adaptive", {"pi": 0.01}))
GROUPINGS = ("column", "row")


def relative_error(name: str, params: dict[str, Any], grouping: str, g: torch.Tensor) -> float:
    c = compressors.get(name, grouping=grouping, **params)
    return float((c.decode(c.encode(g)) - g).norm() / g.norm())


def measure(steps: int, count: int, batch_size: int, lr: float, seed: int) -> list[dict[str, Any]]:
    """Per layer (first, last), method and grouping: the mean relative error and its range."""
    torch.manual_seed(seed)
    data = workloads.build_dataset("mnist", seed=seed)
    model = workloads.build_model("mlp", data.input_shape, data.num_classes, width=256, depth=2)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    layers = {"first": linears[0].weight, "last": linears[-1].weight}
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    order = torch.randperm(len(data.train.y), generator=torch.Generator().manual_seed(seed))
    errors: dict[tuple[str, str, str], list[float]] = {}
    for step in range(steps + count):
        batch = order[step * batch_size:(step + 1) * batch_size]
        optimizer.zero_grad()
        F.cross_entropy(model(data.train.x[batch]), data.train.y[batch]).backward()
        if step >= steps:
            for layer, weight in layers.items():
                for name, params in METHODS:
                    for grouping in GROUPINGS:
                        errors.setdefault((layer, name, grouping), []).append(
                            relative_error(name, params, grouping, weight.grad))
        optimizer.step()
    params_of = dict(METHODS)
    return [{"layer": layer, "shape": list(layers[layer].shape), "compressor": name, "params": params_of[name],
             "grouping": grouping, "relative_error": statistics.mean(values), "min": min(values), "max": max(values),
             "steps_before": steps, "measured_steps": count}
            for (layer, name, grouping), values in errors.items()]


def format_table(rows: list[dict[str, Any]]) -> str:
    head = f"{'layer':<6} {'shape':<11} {'compressor':<10} {'column':>8} {'row':>8}"
    lines = [head, "-" * len(head)]
    by = {(r["layer"], r["compressor"], r["grouping"]): r for r in rows}
    for layer in ("first", "last"):
        for name, _ in METHODS:
            col, row = by[(layer, name, "column")], by[(layer, name, "row")]
            shape = "x".join(map(str, col["shape"]))
            lines.append(f"{layer:<6} {shape:<11} {name:<10} {col['relative_error']:>8.3f} "
                         f"{row['relative_error']:>8.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.grouping_error", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50, help="SGD steps before the measured ones")
    ap.add_argument("--measure", type=int, default=10, help="steps whose gradients are measured (mean reported)")
    ap.add_argument("--batch_size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, metavar="PATH", help="save results and machine info here")
    args = ap.parse_args(argv)
    if args.steps < 0 or args.measure < 1 or args.batch_size < 1 or not args.lr > 0:
        ap.error("--steps >= 0, --measure >= 1, --batch_size >= 1 and --lr > 0 expected")
    rows = measure(args.steps, args.measure, args.batch_size, args.lr, args.seed)
    print(f"# relative error ||decode(encode(g)) - g|| / ||g|| of one step, mean over steps "
          f"{args.steps + 1}..{args.steps + args.measure} (mnist, mlp 256x2, SGD lr {args.lr}, "
          f"batch {args.batch_size})")
    print(format_table(rows))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": env_info.describe(), "args": vars(args), "results": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
