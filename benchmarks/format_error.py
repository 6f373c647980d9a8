"""What each 8-bit and 4-bit type does to real gradients: error per bit sent.

    python -m benchmarks.format_error [--workers 4] [--steps 30] [--measure 3] [--seed 0] [--json PATH]

Three workloads, each trained from its initialisation with SGD (momentum 0.9) for ``--steps``
steps on its built-in data: the MLP (width 256, depth 2) and ResNet-20 on the bundled MNIST,
the tiny GPT (2 layers, 64 wide) on the bytes of this interpreter's standard library. Over the
next ``--measure`` steps each of ``--workers`` workers takes the gradient of its own batch, and
every codec below encodes them, tensor by tensor:

- ``bits``: payload bits per gradient entry (headers included), 8 x bytes / entries.
- ``one_step``: the relative error ||decode(encode(g)) - g|| / ||g|| of worker 0's gradient (all
  tensors as one vector), mean over the measured steps.
- ``sra_ef``: the relative error of the averaged gradient that ``sra`` (compressed reduce-scatter
  then all-gather, what a compressed trial runs) gives every worker, with error feedback on both
  sides, against the exact fp32 mean: ||result - mean(g)|| / ||mean(g)||, mean over the measured
  steps. It runs on a gloo process group of ``--workers`` processes on this machine, through
  ``compressors.comm.collectives.sra_compressed`` itself.

The model's weights take the exact mean gradient at each measured step, the same for every codec.
With ``--json PATH`` the table is saved with the machine's description.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import compressors
import workloads
from orchestrator.study import env_info

# (label, codec, params): the 2016 type, today's formats, QSGD, and the 16-bit casts for reference
CONFIGS = (
    ("fp16", "fp16", {}),
    ("bf16", "bf16", {}),
    ("dynamic8", "dynamic8", {}),
    ("linear8", "linear8", {}),
    ("fp8 e4m3", "fp8", {"format": "e4m3"}),
    ("fp8 e5m2", "fp8", {"format": "e5m2"}),
    ("fp8 e4m3 block 32", "fp8", {"format": "e4m3", "block": 32}),
    ("fp8 e5m2 block 32", "fp8", {"format": "e5m2", "block": 32}),
    ("mx e4m3", "mx", {"element": "e4m3"}),
    ("mx e2m1", "mx", {"element": "e2m1"}),
    ("qsgd 8 bits", "qsgd", {"bits": 8}),
    ("qsgd 4 bits", "qsgd", {"bits": 4}),
)
# (name, model, its options, dataset, batch size, lr)
WORKLOADS = (
    ("mlp", "mlp", {"width": 256, "depth": 2}, "mnist", 64, 0.05),
    ("resnet20", "resnet20", {}, "mnist", 32, 0.05),
    ("gpt", "gpt", {}, "python_source", 16, 0.05),
)


def capture(workload: tuple, workers: int, steps: int, measure: int, seed: int) -> list[list[list[torch.Tensor]]]:
    """grads[m][w]: worker w's gradient tensors at measured step m."""
    name, model_name, options, dataset, batch, lr = workload
    torch.manual_seed(seed)
    data = workloads.build_dataset(dataset, seed=seed)
    model = workloads.build_model(model_name, data.input_shape, data.num_classes, **options)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
    order = torch.randperm(len(data.train), generator=torch.Generator().manual_seed(seed))
    cursor = 0

    def gradient() -> list[torch.Tensor]:
        nonlocal cursor
        index = order[cursor:cursor + batch]
        cursor += batch
        if isinstance(data.train, workloads.Split):
            x, y = data.train.x[index], data.train.y[index]
        else:
            x, y = (torch.stack(t) for t in zip(*(data.train[int(i)] for i in index)))
        model.zero_grad()
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
        return [p.grad.detach().clone() for p in params]

    captured = []
    for step in range(steps + measure):
        grads = [gradient() for _ in range(workers if step >= steps else 1)]
        if step >= steps:
            captured.append(grads)
        mean = [torch.stack(g).mean(dim=0) for g in zip(*grads)]
        for p, g in zip(params, mean):
            p.grad = g
        optimizer.step()
    return captured


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1).double() for t in tensors])


def one_step(codec: compressors.Compressor, grads: list[torch.Tensor]) -> float:
    decoded = [codec.decode(codec.encode(g, step=0, stream=i)) for i, g in enumerate(grads)]
    return float((_flat(decoded) - _flat(grads)).norm() / _flat(grads).norm())


def _sra_rank(rank: int, world: int, path: str, configs: tuple) -> dict[str, list[list[torch.Tensor]]]:
    """On one rank: per codec label, the averaged gradient sra gives at each measured step (the gradients
    come in a file: as arguments each tensor would hold a file descriptor)."""
    from compressors.comm import collectives, pipeline
    from compressors.comm.feedback import ErrorFeedback

    captured = torch.load(path)
    out = {}
    for label, name, params in configs:
        codec = compressors.get(name, **params)
        ef, server_ef = ErrorFeedback(), ErrorFeedback()
        results = []
        for step, grads in enumerate(captured):
            tensors = [g.clone() for g in grads[rank]]
            pipeline.run(collectives.sra_compressed(tensors, list(range(len(tensors))), codec, ef, server_ef, step,
                                                    (None, None)))
            results.append(tensors)
        out[label] = results
    return out


def measure(workers: int, steps: int, count: int, seed: int) -> list[dict[str, Any]]:
    from tests.distributed import run_ranks

    rows = []
    for workload in WORKLOADS:
        captured = capture(workload, workers, steps, count, seed)
        numel = sum(g.numel() for g in captured[0][0])
        shapes = [tuple(g.shape) for g in captured[0][0]]
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "gradients.pt")
            torch.save(captured, path)
            averaged = run_ranks(workers, _sra_rank, path, CONFIGS)[0]
        for label, name, params in CONFIGS:
            codec = compressors.get(name, **params)
            nbytes = sum(codec.payload_nbytes(s) for s in shapes)
            errors = []
            for step, grads in enumerate(captured):
                exact = _flat([torch.stack(g).double().mean(dim=0) for g in zip(*grads)])
                errors.append(float((_flat(averaged[label][step]) - exact).norm() / exact.norm()))
            rows.append({"workload": workload[0], "entries": numel, "config": label, "compressor": name,
                         "params": params, "bits": 8 * nbytes / numel,
                         "one_step": statistics.mean(one_step(codec, grads[0]) for grads in captured),
                         "sra_ef": statistics.mean(errors), "sra_ef_steps": errors})
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    names = list(dict.fromkeys(r["workload"] for r in rows))
    head = f"{'type':<18} {'bits':>5} " + " ".join(f"{n + ' 1-step':>13} {n + ' sra+ef':>13}" for n in names)
    lines = [head, "-" * len(head)]
    by = {(r["config"], r["workload"]): r for r in rows}
    for label, _, _ in CONFIGS:
        first = by[(label, names[0])]
        cells = " ".join(f"{by[(label, n)]['one_step']:>13.4f} {by[(label, n)]['sra_ef']:>13.4f}" for n in names)
        lines.append(f"{label:<18} {first['bits']:>5.2f} {cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.format_error", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=4, help="workers of the gloo group (processes on this machine)")
    ap.add_argument("--steps", type=int, default=30, help="SGD steps before the measured ones")
    ap.add_argument("--measure", type=int, default=3, help="measured steps (mean reported)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, metavar="PATH", help="save results and machine info here")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.steps < 0 or args.measure < 1:
        ap.error("--workers >= 1, --steps >= 0 and --measure >= 1 expected")
    rows = measure(args.workers, args.steps, args.measure, args.seed)
    print(f"# relative L2 error of the gradient (one step, worker 0) and of the averaged gradient after sra "
          f"with error feedback ({args.workers} workers), mean over steps {args.steps + 1}.."
          f"{args.steps + args.measure}; bits: payload bits per entry")
    print(format_table(rows))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps({"machine": env_info.describe(), "args": vars(args), "results": rows},
                                        indent=1))
        temporary.replace(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
