"""VGG-11 and VGG-16 (Simonyan & Zisserman 2015, configurations A and D).

Options:
- ``batch_norm`` (default true): BatchNorm after every convolution (torchvision's
  ``vgg*_bn``). The 2014 networks had none, but without it VGG-16 trained from
  scratch needs careful initialisation and learning rates; ``false`` gives the
  original networks.
- ``head`` (default ``"imagenet"``): the original classifier, 7x7 adaptive
  average pool then 4096-4096-classes fully connected with dropout 0.5, whose
  ~120M weights dominate the gradient (the case the seed papers study);
  ``"cifar"``: global average pool and one linear layer 512-classes, the usual
  small-image variant.

Max pools round up (``ceil_mode``) so a 28x28 input halves five times to 1x1
instead of vanishing; for 32x32 and 224x224 inputs this changes nothing.
Parameter counts match torchvision for 3x224x224 input, 1000 classes:
vgg11 132,863,336 (bn 132,868,840), vgg16 138,357,544 (bn 138,365,992).

Parameter counts, 10 classes, defaults (batch_norm, imagenet head):

========  ================  ===================
model     MNIST (1x28x28)   CIFAR-10 (3x32x32)
========  ================  ===================
vgg11     128,811,658       128,812,810
vgg16     134,308,810       134,309,962
========  ================  ===================

With ``head="cifar"`` (batch_norm), MNIST / CIFAR-10: vgg11 9,229,962 / 9,231,114 and
vgg16 14,727,114 / 14,728,266.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from .options import image_channels

POOL = "M"
VGG11 = (64, POOL, 128, POOL, 256, 256, POOL, 512, 512, POOL, 512, 512, POOL)
VGG16 = (64, 64, POOL, 128, 128, POOL, 256, 256, 256, POOL, 512, 512, 512, POOL, 512, 512, 512, POOL)
HEADS = ("imagenet", "cifar")


def _vgg(
    name: str,
    config: Sequence[int | str],
    input_shape: tuple[int, ...],
    num_classes: int,
    batch_norm: bool,
    head: str,
) -> nn.Module:
    layers: list[nn.Module] = []
    in_channels = image_channels(name, input_shape)
    for item in config:
        if item == POOL:
            layers.append(nn.MaxPool2d(2, 2, ceil_mode=True))
            continue
        # Convolution bias kept even before BatchNorm, as torchvision does, so counts match it.
        layers.append(nn.Conv2d(in_channels, int(item), kernel_size=3, padding=1))
        if batch_norm:
            layers.append(nn.BatchNorm2d(int(item)))
        layers.append(nn.ReLU(inplace=True))
        in_channels = int(item)
    if head == "imagenet":
        layers += [
            nn.AdaptiveAvgPool2d(7),
            nn.Flatten(),
            nn.Linear(in_channels * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, num_classes),
        ]
    else:
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, num_classes)]
    return nn.Sequential(*layers)


def build_vgg11(
    input_shape: tuple[int, ...], num_classes: int, *, batch_norm: bool = True, head: str = "imagenet"
) -> nn.Module:
    return _vgg("vgg11", VGG11, input_shape, num_classes, batch_norm, head)


def build_vgg16(
    input_shape: tuple[int, ...], num_classes: int, *, batch_norm: bool = True, head: str = "imagenet"
) -> nn.Module:
    return _vgg("vgg16", VGG16, input_shape, num_classes, batch_norm, head)
