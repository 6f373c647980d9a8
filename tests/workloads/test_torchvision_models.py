"""workloads/torchvision_models.py: torchvision's models built on the meta device (parameter counts, the head,
no memory), the one-line problems with a name, an option or an input shape, and the messages without
torchvision (CPU, fast).

The tests that build models need torchvision and skip without it; the last one runs everywhere."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from workloads.torchvision_models import build_torchvision, torchvision_names, torchvision_problem

MISSING = 'model torchvision:resnet50 needs torchvision: pip install "lowprec[vision]"'


@pytest.fixture
def torchvision():
    return pytest.importorskip("torchvision", reason="torchvision models need torchvision (lowprec[vision])")


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_meta(name: str, num_classes: int, **options) -> nn.Module:
    with torch.device("meta"):
        return build_torchvision(name, (3, 224, 224), num_classes, **options)


# torchvision's published counts for 1000 classes; 10 classes take (1000 - 10) x (features + 1) off the head.
@pytest.mark.parametrize("name,classes_1000,features", [("resnet50", 25_557_032, 2048), ("vgg19", 143_667_240, 4096)])
def test_parameter_counts_and_head(torchvision, name, classes_1000, features):
    model = build_meta(name, 1000)
    assert count(model) == classes_1000
    assert all(p.is_meta for p in model.parameters())
    small = build_meta(name, 10)
    assert count(small) == classes_1000 - 990 * (features + 1)
    head = [m for m in small.modules() if isinstance(m, nn.Linear)][-1]
    assert (head.in_features, head.out_features) == (features, 10)


def test_options_reach_the_constructor(torchvision):
    assert build_meta("vgg19", 10, dropout=0.2).classifier[2].p == 0.2
    assert torchvision_problem("vgg19", (3, 64, 64), {"dropout": 0.2}) is None


def test_builds_on_cpu(torchvision):
    torch.manual_seed(0)
    model = build_torchvision("resnet18", [3, 32, 32], 7)
    with torch.no_grad():
        assert model.eval()(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_names(torchvision):
    names = torchvision_names()
    assert {"resnet50", "vgg19", "vit_b_16"} <= set(names)
    # Only classification models: no detection or segmentation ones.
    assert "fasterrcnn_resnet50_fpn" not in names and "deeplabv3_resnet50" not in names


def test_unknown_name(torchvision):
    assert torchvision_problem("resnt50", (3, 224, 224), {}) == (
        f"unknown model torchvision:resnt50 (did you mean torchvision:resnet50?); torchvision has "
        f"{len(torchvision_names())} classification models, "
        "torchvision.models.list_models(module=torchvision.models) names them"
    )
    assert torchvision_problem("fasterrcnn_resnet50_fpn", (3, 224, 224), {}).startswith(
        "unknown model torchvision:fasterrcnn_resnet50_fpn"
    )


def test_bad_options(torchvision):
    assert torchvision_problem("resnet50", (3, 224, 224), {"dropout": 0.5}) == (
        "model torchvision:resnet50 refuses options {'dropout': 0.5}: "
        "ResNet.__init__() got an unexpected keyword argument 'dropout'"
    )
    assert torchvision_problem("resnet50", (3, 224, 224), {"weights": "IMAGENET1K_V1"}) == (
        "model torchvision:resnet50: option(s) weights cannot be given (num_classes comes from the dataset; "
        "weights are never downloaded)"
    )
    with pytest.raises(ValueError, match=r"^model torchvision:resnet50 refuses options \{'dropout': 0.5\}"):
        build_meta("resnet50", 10, dropout=0.5)


def test_regnet_checked_without_its_weights(torchvision):
    # regnet's constructor reads tensor values, which meta tensors lack; 644M weights must not be allocated.
    assert torchvision_problem("regnet_y_128gf", (3, 224, 224), {}) is None
    assert torchvision_problem("regnet_y_400mf", (3, 224, 224), {"dropout": 0.1}) == (
        "model torchvision:regnet_y_400mf refuses options {'dropout': 0.1}: "
        "RegNet.__init__() got an unexpected keyword argument 'dropout'"
    )
    assert nn.Linear(2, 2).weight.device.type == "cpu"


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32), (3, 32, 32, 1)])
def test_bad_input_shape(torchvision, shape):
    assert torchvision_problem("resnet50", shape, {}) == (
        f"model torchvision:resnet50 needs an RGB input_shape [3, height, width], got {list(shape)}"
    )


def test_an_input_shape_unknown_before_the_dataset_is_read_is_checked_as_an_imagenet_image(torchvision):
    assert torchvision_problem("resnet50", None, {}) is None
    assert "refuses options" in torchvision_problem("resnet50", None, {"dropout": 0.5})


def test_without_torchvision(monkeypatch):
    # None in sys.modules makes ``import torchvision`` fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "torchvision", None)
    assert torchvision_problem("resnet50", (3, 224, 224), {}) == MISSING
    with pytest.raises(ValueError) as err:
        build_torchvision("resnet50", (3, 224, 224), 10)
    assert str(err.value) == MISSING
    assert torchvision_names() == ()
