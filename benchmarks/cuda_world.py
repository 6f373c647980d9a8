"""A one-GPU NCCL world (``torchrun --nproc_per_node=1``): every compressor's every collective on
CUDA tensors, and a short MLP training under DDP with every compressor's hook.

Collectives: a Reducer per (compressor, algorithm) with ``impl="auto"`` (the CUDA kernels) over
NCCL averages a list of CUDA tensors; the same Reducer with ``impl="numba"`` over a gloo group
averages CPU copies; the two results must agree bit for bit (NaNs aside). Training: 30 SGD steps of
a 3-layer MLP on synthetic data, DDP with ``compressors.ddp.comm_hook`` (overlap on); the loss must
stay finite and fall. Writes a JSON of the results to the path given (--out) and exits 1 if any failed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
import traceback

import numpy as np
import torch
import torch.distributed as dist

import compressors
from compressors import ddp


def _collectives(name: str, algorithm: str, cpu_group: dist.ProcessGroup) -> dict:
    g = torch.Generator().manual_seed(1)
    tensors = [torch.randn(4096, 33, generator=g), torch.randn(1000, generator=g), torch.randn(7, generator=g)]
    gpu = [t.cuda() for t in tensors]
    reducer = compressors.Reducer(name, algorithm, min_compress_numel=0)
    reducer.average(gpu)
    torch.cuda.synchronize()
    row = {"compressor": name, "algorithm": algorithm,
           "uses_cuda_kernels": reducer.codec.uses_cuda("cuda"), "finite": all(bool(t.isfinite().all()) for t in gpu)}
    if reducer.codec.has_numba:
        reference = compressors.Reducer(name, algorithm, min_compress_numel=0, group=cpu_group, impl="numba")
        cpu = [t.clone() for t in tensors]
        reference.average(cpu)
        row["same_as_numba"] = all(np.array_equal(a.cpu().numpy().view(np.uint32), b.numpy().view(np.uint32))
                                   for a, b in zip(gpu, cpu))
    row["ok"] = row["finite"] and row.get("same_as_numba", True)
    return row


def _training(name: str, steps: int = 30) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    ddp.comm_hook(name, min_compress_numel=0).register(ddp_model)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(512, 64, device="cuda", generator=g)
    y = (x[:, :10] * 3).argmax(dim=1)
    losses = []
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp_model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return {"compressor": name, "first_loss": losses[0], "last_loss": losses[-1],
            "seconds": time.perf_counter() - start,
            "ok": all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args()
    dist.init_process_group("nccl", device_id=torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))))
    torch.cuda.set_device(0)
    cpu_group = dist.new_group(backend="gloo")
    rows, failures = {"collectives": [], "training": []}, 0
    for name in compressors.NAMES:
        for algorithm in compressors.algorithms(name) if name in compressors.COMPRESSORS else ():
            try:
                row = _collectives(name, algorithm, cpu_group)
            except Exception:
                row = {"compressor": name, "algorithm": algorithm, "ok": False, "error": traceback.format_exc()}
            failures += not row["ok"]
            rows["collectives"].append(row)
            print("collective", name, algorithm, "ok" if row["ok"] else "FAILED", row.get("error", ""), flush=True)
        try:
            row = _training(name)
        except Exception:
            row = {"compressor": name, "ok": False, "error": traceback.format_exc()}
        failures += not row["ok"]
        rows["training"].append(row)
        print("training", name, "ok" if row["ok"] else "FAILED", row.get("last_loss", row.get("error")), flush=True)
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
    dist.destroy_process_group()
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
