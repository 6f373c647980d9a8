"""Every compressor's collectives and DDP hooks on CUDA tensors, in a world that torchrun makes.

    torchrun --nproc_per_node=N -m benchmarks.cuda_world --out PATH [--backend nccl|gloo] [--parts collectives,hooks]

One GPU: NCCL refuses two ranks on one device, so a one-rank NCCL world checks DDP and PyTorch's
hooks over NCCL and the kernels on CUDA tensors (a Reducer of one rank starts no collective), and 2
or 4 ranks sharing the GPU over gloo (``--backend gloo``) run the kernels inside multi-rank sra,
allgather and hierarchical (gloo stages CUDA tensors through host memory). ``--device cpu`` runs the
same checks on CPU tensors (a dry run of this script on a machine without a GPU).

- collectives: a Reducer per (compressor, algorithm) with ``impl="auto"`` (the CUDA kernels on CUDA
  tensors) averages a list of tensors, different on every rank; the same Reducer with
  ``impl="numba"`` over a second gloo group averages CPU copies. Where the codec has kernels the two
  must agree bit for bit (NaN bits aside); the casts' native all_reduce may sum in another order
  on CUDA tensors, so there they must agree to 1e-3.
- hooks: 30 SGD steps of a 3-layer MLP and of ResNet-20 (a fixed batch per rank, so the loss can
  fall in 30 steps) under DDP with every compressor's hook, once overlapped and once blocking:
  the parameters must be identical bit for bit, every loss finite and the last below the first
  (cuDNN's deterministic algorithms: its fastest may sum in another order each run).

Rank 0 rewrites the JSON after every check. With several ranks, a check that raises on one ends the
world (torchrun stops the rest): the ranks' collectives would no longer pair up. Collectives wait at
most two minutes. The world exits 1 if any check failed on any rank.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import compressors
from compressors import ddp
from orchestrator.study.records import write_atomic
from tests.helpers import canonical
from workloads.resnet import build_resnet20

PARTS = ("collectives", "hooks")
# Sign methods send +-1 (times a scale for scaledsign): their step is lr per entry, whatever the gradient.
SIGN_LR = 0.002
LR = 0.05


def _canonical(t: torch.Tensor) -> np.ndarray:
    """The float32 words of ``t``, NaN payloads aside."""
    return canonical(t.detach().cpu().reshape(-1).numpy())


def _collectives(name: str, algorithm: str, device: torch.device, cpu_group: dist.ProcessGroup,
                 rank: int) -> dict:
    g = torch.Generator().manual_seed(1 + rank)
    tensors = [torch.randn(4096, 33, generator=g), torch.randn(1000, generator=g), torch.randn(7, generator=g),
               torch.randn(70_001, generator=g) * 1e-3]
    on_device = [t.to(device, copy=True) for t in tensors]  # a copy on CPUs too: averaging works in place
    reducer = compressors.Reducer(name, algorithm, min_compress_numel=0)
    reducer.average(on_device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    row = {"compressor": name, "algorithm": algorithm, "uses_cuda_kernels": reducer.codec.uses_cuda(device),
           "finite": all(bool(t.isfinite().all()) for t in on_device)}
    kernels = reducer.codec.has_numba
    reference = compressors.Reducer(name, algorithm, min_compress_numel=0, group=cpu_group,
                                    impl="numba" if kernels else "auto")
    cpu = [t.clone() for t in tensors]
    reference.average(cpu)
    if kernels:
        differ = sum(int((_canonical(a) != _canonical(b)).sum()) for a, b in zip(on_device, cpu))
        row["entries_differing_from_cpu"] = differ
        row["ok"] = row["finite"] and differ == 0
    else:
        worst = max(float((a.cpu() - b).abs().max()) for a, b in zip(on_device, cpu))
        row["max_abs_diff_from_cpu"] = worst
        row["ok"] = row["finite"] and worst <= 1e-3
    return row


def _model(kind: str, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                    torch.nn.ReLU(), torch.nn.Linear(256, 10))
    else:
        model = build_resnet20((3, 32, 32), 10)
    return model.to(device)


def _batch(kind: str, device: torch.device, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    if kind == "mlp":
        x = torch.randn(512, 64, generator=g)
        y = (x[:, :10] * 3).argmax(dim=1)
    else:
        x = torch.randn(32, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (32,), generator=g)
    return x.to(device), y.to(device)


def _train(name: str, kind: str, overlap: bool, steps: int, device: torch.device, rank: int) -> tuple[torch.Tensor, list]:
    model = _model(kind, device)
    ids = [device.index or 0] if device.type == "cuda" else None
    # Small buckets: several per step, so overlapped buckets' phases interleave.
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=0.25)
    # Plain SGD: under the optimizer's momentum, a sparsifier's error feedback swings the loss up
    # and down for the first tens of steps (what DGC's momentum correction is for).
    owns = compressors.owns_momentum(name)
    ddp.comm_hook(name, min_compress_numel=0, overlap=overlap, **({"momentum": 0.0} if owns else {})
                  ).register(ddp_model)
    lr = SIGN_LR if name in ("signsgd", "efsignsgd", "scaledsign") else LR
    opt = torch.optim.SGD(ddp_model.parameters(), lr=lr)
    x, y = _batch(kind, device, rank)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(ddp_model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu(), losses


def _hooks(name: str, kind: str, steps: int, device: torch.device, rank: int) -> dict:
    start = time.perf_counter()
    overlapped, losses = _train(name, kind, True, steps, device, rank)
    blocking, _ = _train(name, kind, False, steps, device, rank)
    differ = int((_canonical(overlapped) != _canonical(blocking)).sum())
    row = {"compressor": name, "model": kind, "first_loss": losses[0], "last_loss": losses[-1],
           "params_differing": differ, "seconds": round(time.perf_counter() - start, 2)}
    row["ok"] = differ == 0 and all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    return row


# The methods a DDP hook runs (an optimizer method, 1-bit Adam, averages in its optimizer's step instead).
HOOKED = tuple(name for name in compressors.NAMES if not compressors.registry.optimizer_method(name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write (rank 0)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma separated, of {', '.join(PARTS)}")
    parser.add_argument("--steps", type=int, default=30, help="training steps per hook run")
    parser.add_argument("--compressors", default=",".join(HOOKED), help="comma separated")
    args = parser.parse_args()
    parts, names = args.parts.split(","), args.compressors.split(",")
    if any(p not in PARTS for p in parts) or any(n not in HOOKED for n in names):
        parser.error(f"--parts of {', '.join(PARTS)}; --compressors of {', '.join(HOOKED)}")
    if args.device == "cpu" and args.backend == "nccl":
        parser.error("--device cpu runs over gloo: add --backend gloo")
    if args.device == "cuda":
        device = torch.device("cuda", 0 if args.backend == "gloo" else int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    else:
        device = torch.device("cpu")
    wait = datetime.timedelta(minutes=2)
    dist.init_process_group(args.backend, timeout=wait, **({"device_id": device} if args.backend == "nccl" else {}))
    rank, world = dist.get_rank(), dist.get_world_size()
    cpu_group = dist.new_group(backend="gloo", timeout=wait)
    rows: dict = {"backend": args.backend, "device": str(device), "world": world, "collectives": [], "hooks": []}
    checks = []  # (part, label, check)
    for name in names:
        if "collectives" in parts and name in compressors.COMPRESSORS:
            checks += [("collectives", {"compressor": name, "algorithm": algorithm},
                        lambda n=name, a=algorithm: _collectives(n, a, device, cpu_group, rank))
                       for algorithm in compressors.algorithms(name)]
        if "hooks" in parts:
            checks += [("hooks", {"compressor": name, "model": kind},
                        lambda n=name, k=kind: _hooks(n, k, args.steps, device, rank)) for kind in ("mlp", "resnet20")]
    for part, label, check in checks:
        try:
            row = check()
        except Exception:
            row = {**label, "ok": False, "error": traceback.format_exc()}
        rows[part].append(row)
        if rank == 0 or "error" in row:
            print(f"[rank {rank}]", part, *label.values(), "ok" if row["ok"] else "FAILED",
                  row.get("error", "") if part == "collectives" else row.get(
                      "error", f"loss {row.get('first_loss', 0):.4f} -> {row.get('last_loss', 0):.4f}, "
                               f"{row.get('params_differing')} parameters differ"), flush=True)
        if rank == 0:
            write_atomic(Path(args.out), json.dumps(rows, indent=1))
        if "error" in row and world > 1:
            # The other ranks may wait inside this check's collectives, or pair its next ones with them:
            # end the world (torchrun stops every rank) and keep what rank 0 wrote.
            os._exit(1)
    # Every rank's verdict: a rank whose results differ from rank 0's fails the world too.
    failed = torch.tensor([sum(not r["ok"] for r in rows["collectives"] + rows["hooks"])], dtype=torch.int64)
    dist.all_reduce(failed, group=cpu_group)
    rows["failed_on_any_rank"] = int(failed)
    if rank == 0:
        write_atomic(Path(args.out), json.dumps(rows, indent=1))
    dist.destroy_process_group()
    raise SystemExit(1 if int(failed) else 0)


if __name__ == "__main__":
    main()
