"""Models by name: ``build_model(name, input_shape, num_classes, **options)``.

Parameter counts of every model for MNIST and CIFAR-10 inputs are listed in
the docstring of its module (mlp, lenet, resnet, vgg, alexnet).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from .alexnet import build_alexnet
from .lenet import build_lenet5
from .mlp import build_mlp
from .options import call_builder, check_int, check_shape
from .resnet import build_resnet18, build_resnet20, build_resnet50
from .vgg import build_vgg11, build_vgg16

MODELS: dict[str, Callable[..., nn.Module]] = {
    "mlp": build_mlp,
    "lenet5": build_lenet5,
    "resnet20": build_resnet20,
    "resnet18": build_resnet18,
    "resnet50": build_resnet50,
    "vgg11": build_vgg11,
    "vgg16": build_vgg16,
    "alexnet": build_alexnet,
}
MODEL_NAMES = tuple(MODELS)


def build_model(name: str, input_shape: Sequence[int], num_classes: int, **options: Any) -> nn.Module:
    """A freshly initialised model mapping [B, *input_shape] to logits [B, num_classes].

    Options (None = default): mlp: width (4096), depth (3 hidden layers);
    vgg11/vgg16: batch_norm (true), head ("imagenet" | "cifar"); others none.
    Unknown names or options raise ValueError listing the valid ones. Weights
    come from torch's global RNG: seed it (``torch.manual_seed``) for
    identical replicas.
    """
    shape = check_shape("input_shape", input_shape)
    num_classes = check_int("num_classes", num_classes, 1)
    return call_builder("model", name, MODELS, (shape, num_classes), options)
