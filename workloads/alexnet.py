"""AlexNet in torchvision's single-tower form (Krizhevsky 2014, "one weird trick": 64/192/384/256/256 channels).

Five convolutions (11x11/4, 5x5, 3x3, 3x3, 3x3) with three 3x3/2 max pools,
a 6x6 adaptive average pool, then 4096-4096-classes fully connected with
dropout 0.5. Parameter count matches torchvision for 3x224x224 input and 1000
classes: 61,100,840. A max pool whose window is larger than its input map is
skipped, so 28x28 and 32x32 inputs work (the 11x11/4 first layer leaves them
6x6 or 7x7), as does any of at least 7x7; for 224x224 input every pool runs, as in the original.

Parameter counts, 10 classes: MNIST input (1x28x28) 57,029,322; CIFAR-10 input (3x32x32) 57,044,810.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .options import image_channels


class MaxPoolIfFits(nn.Module):
    """3x3 stride-2 max pool, or the identity on maps smaller than 3x3."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if min(x.shape[-2:]) < 3:
            return x
        return F.max_pool2d(x, kernel_size=3, stride=2)


# The 11x11 stride-4 first convolution (padding 2) leaves no map at all below 7 pixels.
MIN_SIDE = 7


def build_alexnet(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    channels = image_channels("alexnet", input_shape)
    if min(input_shape[1:]) < MIN_SIDE:
        raise ValueError(f"model 'alexnet' needs images of at least {MIN_SIDE}x{MIN_SIDE} pixels, "
                         f"got input_shape {list(input_shape)}")
    return nn.Sequential(
        nn.Conv2d(channels, 64, kernel_size=11, stride=4, padding=2),
        nn.ReLU(inplace=True),
        MaxPoolIfFits(),
        nn.Conv2d(64, 192, kernel_size=5, padding=2),
        nn.ReLU(inplace=True),
        MaxPoolIfFits(),
        nn.Conv2d(192, 384, kernel_size=3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, kernel_size=3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, kernel_size=3, padding=1),
        nn.ReLU(inplace=True),
        MaxPoolIfFits(),
        nn.AdaptiveAvgPool2d(6),
        nn.Flatten(),
        nn.Dropout(0.5),
        nn.Linear(256 * 6 * 6, 4096),
        nn.ReLU(inplace=True),
        nn.Dropout(0.5),
        nn.Linear(4096, 4096),
        nn.ReLU(inplace=True),
        nn.Linear(4096, num_classes),
    )
