"""LeNet-5 (LeCun et al. 1998) in its common modern form: ReLU and max pooling.

Two 5x5 convolutions (6 and 16 channels; the first padded by 2 so a 28x28
MNIST digit keeps its size, as the paper's 32x32 input did), then fully
connected 400-120-84-classes. An adaptive average pool to 5x5 before the
classifier lets any input of at least 12x12 pixels use the same classifier
(for 28x28 it is the identity).

Parameter counts, 10 classes: MNIST input (1x28x28) 61,706; CIFAR-10 input (3x32x32) 62,006.
"""

from __future__ import annotations

from torch import nn

from .options import image_channels


# The second 2x2 pool needs a 2x2 map from the second convolution: half the input, rounded down, less 4.
MIN_SIDE = 12


def build_lenet5(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    channels = image_channels("lenet5", input_shape)
    if min(input_shape[1:]) < MIN_SIDE:
        raise ValueError(f"model 'lenet5' needs images of at least {MIN_SIDE}x{MIN_SIDE} pixels, "
                         f"got input_shape {list(input_shape)}")
    return nn.Sequential(
        nn.Conv2d(channels, 6, kernel_size=5, padding=2),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(5),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120),
        nn.ReLU(inplace=True),
        nn.Linear(120, 84),
        nn.ReLU(inplace=True),
        nn.Linear(84, num_classes),
    )
