"""The task's loss, the test set's metrics after an epoch, and the accuracy that chance scores.

Each rank evaluates every world-th sample of the test set; ``aggregate`` sums the counts over the ranks.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset

import workloads

EVAL_BATCH = 1000  # samples per forward pass when evaluating an in-memory classification split
# Values reduced over the ranks, entry by entry, with an op ("sum", "max", "min").
Aggregate = Callable[[list[float], str], list[float]]


def task_loss(out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of logits [..., classes] against targets [...]: a label per sample (classification) or
    the next token at every position (a language model), in nats per target."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction=reduction)


def evaluate(model: torch.nn.Module, data: workloads.DatasetPair, rank: int, world: int, device: torch.device,
             aggregate: Aggregate, config: dict[str, Any]) -> dict[str, float | None]:
    """test_accuracy, test_loss and test_perplexity (a language model's; None otherwise) on the test set's
    first eval_samples (all of it by default), each rank taking every world-th sample."""
    test = data.test
    count = len(test) if config["eval_samples"] is None else min(config["eval_samples"], len(test))
    if isinstance(test, workloads.Split):
        per_pass = EVAL_BATCH if data.task == workloads.CLASSIFICATION else config["batch_size"]
        x_all, y_all = test.x[rank:count:world], test.y[rank:count:world]
        batches = ((x_all[i:i + per_pass], y_all[i:i + per_pass]) for i in range(0, len(y_all), per_pass))
    else:
        batches = DataLoader(Subset(test, range(rank, count, world)), batch_size=config["batch_size"],
                             num_workers=config["loader_workers"], pin_memory=device.type == "cuda")
    model.eval()
    correct, loss_sum, targets = 0.0, 0.0, 0.0
    with torch.no_grad():
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss_sum += float(task_loss(out, y, "sum"))
            correct += float((out.argmax(-1) == y).sum())
            targets += y.numel()
    model.train()
    correct, loss_sum, targets = aggregate([correct, loss_sum, targets], "sum")
    loss = loss_sum / targets
    perplexity = float(torch.tensor(loss, dtype=torch.float64).exp()) if data.task == workloads.LANGUAGE_MODEL \
        else None
    return {"test_accuracy": correct / targets, "test_loss": loss, "test_perplexity": perplexity}


def constant_accuracy(data: workloads.DatasetPair, config: dict[str, Any]) -> float | None:
    """The test accuracy of always predicting the most frequent class: what chance means here; None where
    the test set does not say without reading every sample, and for a language model, whose next-token
    accuracy says little of its learning (its loss does)."""
    test = data.test
    if data.task == workloads.LANGUAGE_MODEL:
        return None
    if isinstance(test, workloads.Split):
        y = test.y[:config["eval_samples"]].reshape(-1)
        return float(torch.bincount(y).max()) / y.numel()
    if hasattr(test, "targets"):  # torchvision's ImageFolder
        y = torch.as_tensor(test.targets)[:config["eval_samples"]]
        return float(torch.bincount(y).max()) / y.numel()
    return None
