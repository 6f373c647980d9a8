"""Fully connected network, the seeds' MNIST/ImageNet model: ``depth`` hidden layers of ``width`` with ReLU.

Parameter counts, 10 classes:
- MNIST input (784 features), default width 4096, depth 3 (784-4096-4096-4096-10): 36,818,954
- CIFAR-10 input (3,072 features), same defaults: 46,190,602
"""

from __future__ import annotations

import math

from torch import nn



def build_mlp(
    input_shape: tuple[int, ...], num_classes: int, *, width: int = 4096, depth: int = 3
) -> nn.Module:
    """Flatten, then ``depth`` x (Linear(width), ReLU), then Linear(num_classes); depth 0 = linear model."""
    layers: list[nn.Module] = [nn.Flatten()]
    features = math.prod(input_shape)
    for _ in range(depth):
        layers += [nn.Linear(features, width), nn.ReLU(inplace=True)]
        features = width
    layers.append(nn.Linear(features, num_classes))
    return nn.Sequential(*layers)
