"""The models of workloads/ (models.py, mlp.py, lenet.py, resnet.py, vgg.py, alexnet.py): shapes,
parameter counts against hand counts and torchvision's, errors; and model_summary.py (CPU, fast)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workloads import build_model, model_summary


# ---------------------------------------------------------------- parameter counts (independent of the code under test)


def dense(inputs: int, outputs: int) -> int:
    return inputs * outputs + outputs


def conv(in_channels: int, out_channels: int, kernel: int, bias: bool = True) -> int:
    return in_channels * out_channels * kernel * kernel + (out_channels if bias else 0)


def bn(channels: int) -> int:
    return 2 * channels


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- models


@pytest.mark.parametrize(
    "name,shape,options",
    [
        ("mlp", (1, 28, 28), {}),
        ("mlp", (20,), {"width": 8, "depth": 2}),
        ("mlp", (3, 32, 32), {"depth": 0}),
        ("lenet5", (1, 28, 28), {}),
        ("lenet5", (3, 32, 32), {}),
        ("resnet20", (1, 28, 28), {}),
        ("resnet20", (3, 32, 32), {}),
        ("resnet18", (3, 32, 32), {}),
        ("resnet18", (1, 28, 28), {}),
        ("resnet50", (3, 32, 32), {}),
        ("vgg11", (1, 28, 28), {"head": "cifar"}),
        ("vgg11", (3, 32, 32), {"batch_norm": False, "head": "cifar"}),
        # ImageNet's heads of 4096 units: 60 to 140 million parameters to initialize
        pytest.param("vgg16", (3, 32, 32), {}, marks=pytest.mark.slow),
        pytest.param("alexnet", (1, 28, 28), {}, marks=pytest.mark.slow),
        pytest.param("alexnet", (3, 32, 32), {}, marks=pytest.mark.slow),
    ],
)
def test_model_forward_shape(name, shape, options):
    torch.manual_seed(0)
    model = build_model(name, shape, 10, **options)
    with torch.no_grad():
        logits = model.eval()(torch.randn(2, *shape))
    assert logits.shape == (2, 10) and torch.isfinite(logits).all()


@pytest.mark.slow
def test_models_run_on_imagenet_sized_input():
    torch.manual_seed(0)
    for name in ("resnet18", "alexnet"):
        model = build_model(name, [3, 224, 224], 1000).eval()
        with torch.no_grad():
            assert model(torch.randn(1, 3, 224, 224)).shape == (1, 1000)


def test_model_train_step_gives_gradients():
    torch.manual_seed(0)
    model = build_model("resnet20", (3, 32, 32), 10)
    loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_mlp_parameter_counts():
    # The papers' MNIST network: 784-4096-4096-4096-10.
    expected = dense(784, 4096) + 2 * dense(4096, 4096) + dense(4096, 10)
    assert expected == 36_818_954
    with torch.device("meta"):
        assert count(build_model("mlp", (1, 28, 28), 10)) == expected
        assert count(build_model("mlp", (20,), 3, width=8, depth=2)) == dense(20, 8) + dense(8, 8) + dense(8, 3)
        assert count(build_model("mlp", (5,), 2, depth=0)) == dense(5, 2)


@pytest.mark.parametrize("channels", [1, 3])
def test_lenet5_parameter_count(channels):
    expected = conv(channels, 6, 5) + conv(6, 16, 5) + dense(400, 120) + dense(120, 84) + dense(84, 10)
    shape = (channels, 28, 28) if channels == 1 else (channels, 32, 32)
    assert count(build_model("lenet5", shape, 10)) == expected
    if channels == 1:
        assert expected == 61_706


@pytest.mark.parametrize("channels", [1, 3])
def test_resnet20_parameter_count(channels):
    def block(cin, cout):
        shortcut = conv(cin, cout, 1, bias=False) + bn(cout) if cin != cout else 0
        return conv(cin, cout, 3, bias=False) + bn(cout) + conv(cout, cout, 3, bias=False) + bn(cout) + shortcut

    expected = conv(channels, 16, 3, bias=False) + bn(16)
    for cin, cout in ((16, 16), (16, 32), (32, 64)):
        expected += block(cin, cout) + 2 * block(cout, cout)
    expected += dense(64, 10)
    assert count(build_model("resnet20", (channels, 32, 32), 10)) == expected
    if channels == 3:
        assert expected == 272_474


@pytest.mark.parametrize(
    "name,options,expected",
    [
        # torchvision's published counts for 3x224x224 input and 1000 classes.
        ("resnet18", {}, 11_689_512),
        ("resnet50", {}, 25_557_032),
        ("vgg11", {"batch_norm": False}, 132_863_336),
        ("vgg11", {}, 132_868_840),
        ("vgg16", {"batch_norm": False}, 138_357_544),
        ("vgg16", {"batch_norm": True}, 138_365_992),
        ("alexnet", {}, 61_100_840),
    ],
)
def test_imagenet_models_match_torchvision_counts(name, options, expected):
    with torch.device("meta"):  # counts without allocating the weights
        assert count(build_model(name, (3, 224, 224), 1000, **options)) == expected


def test_vgg_cifar_head_count():
    # The small-image head replaces the 7x7x512-4096-4096 classifier by one 512-10 layer.
    with torch.device("meta"):
        full = count(build_model("vgg16", (3, 32, 32), 10))
        small = count(build_model("vgg16", (3, 32, 32), 10, head="cifar"))
    assert full - small == dense(512 * 49, 4096) + dense(4096, 4096) + dense(4096, 10) - dense(512, 10)


@pytest.mark.parametrize(
    "name,shape,options,message",
    [
        ("resnet34", (3, 32, 32), {}, "mlp, lenet5, resnet20, resnet18, resnet50, vgg11, vgg16, alexnet"),
        ("mlp", (1, 28, 28), {"widht": 10}, "valid options: width, depth"),
        ("lenet5", (1, 28, 28), {"width": 10}, "takes no options"),
        ("mlp", (1, 28, 28), {"width": 0}, "width"),
        ("mlp", (1, 28, 28), {"depth": True}, "depth"),
        ("vgg11", (3, 32, 32), {"head": "tiny"}, "'imagenet', 'cifar'"),
        ("vgg11", (3, 32, 32), {"batch_norm": "yes"}, "batch_norm"),
        ("lenet5", (784,), {}, "channels, height, width"),
        ("mlp", (1, -2), {}, "input_shape"),
    ],
)
def test_build_model_errors(name, shape, options, message):
    with pytest.raises(ValueError, match=message):
        build_model(name, shape, 10, **options)


@pytest.mark.parametrize("name, smallest", [("lenet5", 12), ("alexnet", 7)])
def test_convnets_refuse_images_smaller_than_they_take(name, smallest):
    for shape in [(1, smallest - 1, 28), (3, 32, smallest - 1)]:
        with pytest.raises(ValueError) as err:
            build_model(name, shape, 10)
        assert str(err.value) == (f"model {name!r} needs images of at least {smallest}x{smallest} pixels, "
                                  f"got input_shape {list(shape)}")
    torch.manual_seed(0)
    model = build_model(name, (1, smallest, smallest), 10).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 1, smallest, smallest)).shape == (2, 10)


def test_none_options_mean_defaults():
    with torch.device("meta"):
        model = build_model("resnet20", [3, 32, 32], 10, width=None, depth=None)
    assert count(model) == 272_474


# ---------------------------------------------------------------- model_summary


def test_model_summary_by_hand():
    model = nn.Sequential(nn.Linear(40, 30), nn.ReLU(), nn.Linear(30, 2))
    # Tensors: 1200 (weight), 30, 60, 2 elements; only the first reaches 1024.
    summary = model_summary(model)
    assert summary == {
        "parameters": 1292,
        "grad_bytes_fp32": 4 * 1292,
        "compressible_share": pytest.approx(1200 / 1292),
    }
    assert model_summary(model, min_compress_numel=60)["compressible_share"] == pytest.approx(1260 / 1292)
    assert model_summary(model, min_compress_numel=1)["compressible_share"] == 1.0


def test_model_summary_frozen_and_empty():
    model = nn.Sequential(nn.Linear(40, 30), nn.Linear(30, 2))
    model[0].weight.requires_grad_(False)
    summary = model_summary(model)
    assert summary["parameters"] == 1292 and summary["grad_bytes_fp32"] == 4 * 92
    assert summary["compressible_share"] == 0.0
    assert model_summary(nn.ReLU()) == {"parameters": 0, "grad_bytes_fp32": 0, "compressible_share": 0.0}
