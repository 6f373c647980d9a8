"""Residual networks (He et al. 2016): CIFAR-style ResNet-20 and ImageNet-style ResNet-18/50.

- ``resnet20``: 3x3 stem with 16 channels, 3 stages of 3 basic blocks (16/32/64
  channels, stride 2 between stages), global average pool, linear classifier.
  Shortcuts that change shape are 1x1 convolution + BatchNorm (the paper's
  option B; its CIFAR ResNets used parameter-free option A, 269,722 parameters
  for CIFAR-10), giving the commonly quoted 272,474 parameters for CIFAR-10.
- ``resnet18`` / ``resnet50``: torchvision's layout (7x7/2 stem and 3x3/2 max
  pool, stages of 64/128/256/512 basic or bottleneck blocks with stride on the
  3x3 convolution, "ResNet v1.5"), so parameter counts match torchvision:
  11,689,512 and 25,557,032 for 3x224x224 input and 1000 classes. The global
  average pool makes them run on 28x28 and 32x32 inputs too (the stem then
  leaves 7x7 or 8x8 maps).

Parameter counts, 10 classes:

============  ==================  ====================
model         MNIST (1x28x28)     CIFAR-10 (3x32x32)
============  ==================  ====================
resnet20      272,186             272,474
resnet18      11,175,370          11,181,642
resnet50      23,522,250          23,528,522
============  ==================  ====================

Convolutions start from He (fan-out) initialisation as in the paper; BatchNorm
from weight 1, bias 0.
"""

from __future__ import annotations

import torch
from torch import nn

from .options import image_channels


def _conv_bn(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding=kernel_size // 2, bias=False),
        nn.BatchNorm2d(out_channels),
    ]


def _shortcut(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    if stride == 1 and in_channels == out_channels:
        return nn.Identity()
    return nn.Sequential(*_conv_bn(in_channels, out_channels, 1, stride))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions; output channels = ``channels``."""

    expansion = 1

    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            *_conv_bn(in_channels, channels, 3, stride),
            nn.ReLU(inplace=True),
            *_conv_bn(channels, channels, 3),
        )
        self.shortcut = _shortcut(in_channels, channels, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.residual(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand; output channels = 4 x ``channels``."""

    expansion = 4

    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        out_channels = channels * self.expansion
        self.residual = nn.Sequential(
            *_conv_bn(in_channels, channels, 1),
            nn.ReLU(inplace=True),
            *_conv_bn(channels, channels, 3, stride),
            nn.ReLU(inplace=True),
            *_conv_bn(channels, out_channels, 1),
        )
        self.shortcut = _shortcut(in_channels, out_channels, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.residual(x) + self.shortcut(x))


def _resnet(
    stem: list[nn.Module],
    stem_channels: int,
    block: type[BasicBlock] | type[Bottleneck],
    stages: list[tuple[int, int]],
    num_classes: int,
) -> nn.Module:
    """``stages``: (channels, blocks) per stage; every stage after the first halves the resolution."""
    layers = list(stem)
    in_channels = stem_channels
    for index, (channels, blocks) in enumerate(stages):
        for position in range(blocks):
            stride = 2 if index > 0 and position == 0 else 1
            layers.append(block(in_channels, channels, stride))
            in_channels = channels * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, num_classes)]
    model = nn.Sequential(*layers)
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    return model


def _imagenet_stem(channels: int) -> list[nn.Module]:
    return [*_conv_bn(channels, 64, 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, padding=1)]


def build_resnet20(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    stem = [*_conv_bn(image_channels("resnet20", input_shape), 16, 3), nn.ReLU(inplace=True)]
    return _resnet(stem, 16, BasicBlock, [(16, 3), (32, 3), (64, 3)], num_classes)


def build_resnet18(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    stem = _imagenet_stem(image_channels("resnet18", input_shape))
    return _resnet(stem, 64, BasicBlock, [(64, 2), (128, 2), (256, 2), (512, 2)], num_classes)


def build_resnet50(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    stem = _imagenet_stem(image_channels("resnet50", input_shape))
    return _resnet(stem, 64, Bottleneck, [(64, 3), (128, 4), (256, 6), (512, 3)], num_classes)
