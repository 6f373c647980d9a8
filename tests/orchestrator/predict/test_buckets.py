"""DDP's bucket assignment as the predictor computes it (orchestrator/predict/buckets.py), against torch's own
(``torch.distributed._compute_bucket_assignment_by_size``, the C++ reducer's, which DDP calls): the same buckets
for the project's models, for parameters of several dtypes and sizes, and for tiny and huge caps."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import workloads
from orchestrator.predict import buckets

MIB = 1024 * 1024


def mixed() -> nn.Module:
    """Parameters of three dtypes, interleaved, from one element to about 4 MiB."""
    model = nn.Module()
    sizes = [(1,), (1024, 1024), (300,), (512, 512), (7, 3), (2048, 1024), (1,), (1000,)]
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float32, torch.float16, torch.float32,
              torch.bfloat16, torch.float16]
    for i, (shape, dtype) in enumerate(zip(sizes, dtypes)):
        model.register_parameter(f"p{i}", nn.Parameter(torch.zeros(shape, dtype=dtype, device="meta")))
    return model


MODELS = {"mlp": lambda: workloads.build_model("mlp", (1, 28, 28), 10),
          "resnet20": lambda: workloads.build_model("resnet20", (3, 32, 32), 10),
          "gpt": lambda: workloads.build_model("gpt", (64,), 256),
          "mixed": mixed}


def torch_buckets(tensors: list[torch.Tensor], limits: list[int]) -> list[list[int]]:
    indices, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [False] * len(tensors))
    return [list(bucket) for bucket in indices]


def test_the_first_bucket_is_ddps():
    assert buckets.FIRST_BUCKET_BYTES == dist._DEFAULT_FIRST_BUCKET_BYTES


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("limits", [[buckets.FIRST_BUCKET_BYTES, 25 * MIB], [buckets.FIRST_BUCKET_BYTES, 1],
                                    [1], [64, 4096, 1], [1024 * MIB], [buckets.FIRST_BUCKET_BYTES, 1024 * MIB]],
                         ids=["default", "tiny cap", "tiny", "three limits", "huge", "huge cap"])
def test_the_assignment_is_torchs(name, limits):
    with torch.device("meta"):
        params = [p.detach() for p in MODELS[name]().parameters()]
    # in model.parameters() order and, as DDP takes them, in reverse
    for tensors in (params, params[::-1]):
        assert buckets.assign(tensors, limits) == torch_buckets(tensors, limits)


@pytest.mark.parametrize("cap", [None, 25, 1, 0.001, 1024])
def test_the_predictors_buckets_are_ddps_over_the_parameters_in_reverse(cap):
    with torch.device("meta"):
        shapes = [tuple(p.shape) for p in workloads.build_model("resnet20", (3, 32, 32), 10).parameters()]
    last = len(shapes) - 1
    grads = [torch.empty(shapes[last - j], device="meta") for j in range(len(shapes))]
    config = torch.nn.parallel.distributed._BucketCapacityConfig.create(cap, None, False)  # DDP's own limits
    limits = [config.first_bucket_bytes_cap, config.bucket_bytes_cap]
    expected = [[last - j for j in bucket] for bucket in torch_buckets(grads, limits)]
    assert buckets.buckets_of(shapes, cap) == expected
