"""torchvision's classification models by name: ``torchvision:NAME`` builds ``torchvision.models.get_model(NAME)``.

Always freshly initialised (``weights=None``: nothing is downloaded), with the dataset's number of
classes as the head's width; any other keyword the model's constructor takes may be given as an
option (resnet50: ``width_per_group``, ``zero_init_residual``; vgg19: ``dropout``; vit_b_16:
``image_size``...). torchvision models take RGB images, so the input shape must be [3, H, W]; most
pool adaptively and run on any size past a minimum, but a vision transformer needs exactly its
``image_size`` (224 unless given). Parameter counts for 1000 classes (torchvision's own):
resnet50 25,557,032; vgg19 143,667,240.

Needs torchvision (``pip install "lowprec[vision]"``); without it every function here reports so.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

TORCHVISION_PREFIX = "torchvision:"
# Set from the dataset, or never taken (pretrained weights would be downloaded at run time).
_RESERVED = ("num_classes", "weights")


def import_torchvision(owner: str) -> Any:
    """The ``torchvision`` module; ValueError naming ``owner`` when it is not installed or does not import."""
    try:
        import torchvision
        import torchvision.models
    except ImportError:
        raise ValueError(f'{owner} needs torchvision: pip install "lowprec[vision]"') from None
    except RuntimeError as err:
        # A torchvision built for another torch fails while registering its C++ operators.
        raise ValueError(f"{owner} needs the torchvision release built for torch {torch.__version__}; "
                         f"the installed one does not import ({err})") from None
    return torchvision


def torchvision_names() -> tuple[str, ...]:
    """torchvision's classification models (``torchvision.models.list_models``); empty without torchvision."""
    try:
        torchvision = import_torchvision("torchvision_names")
    except ValueError:
        return ()
    return tuple(torchvision.models.list_models(module=torchvision.models))


def build_torchvision(name: str, input_shape: Sequence[int], num_classes: int, **options: Any) -> nn.Module:
    """A freshly initialised torchvision model ``name`` (without the prefix) with ``num_classes`` outputs.

    ``options`` go to the model's constructor. An unknown name, an option the model does not take or
    an input shape other than [3, H, W] raise ValueError in one line. Weights come from torch's
    global RNG; built under ``with torch.device("meta")`` the model allocates no memory.
    """
    torchvision = import_torchvision(f"model {TORCHVISION_PREFIX}{name}")
    names = torchvision.models.list_models(module=torchvision.models)
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {TORCHVISION_PREFIX}{close[0]}?)" if close else ""
        raise ValueError(f"unknown model {TORCHVISION_PREFIX}{name}{hint}; torchvision has {len(names)} "
                         "classification models, torchvision.models.list_models(module=torchvision.models) "
                         "names them")
    shape = list(input_shape)
    if len(shape) != 3 or shape[0] != 3:
        raise ValueError(f"model {TORCHVISION_PREFIX}{name} needs an RGB input_shape [3, height, width], "
                         f"got {shape}")
    reserved = sorted(set(options) & set(_RESERVED))
    if reserved:
        raise ValueError(f"model {TORCHVISION_PREFIX}{name}: option(s) {', '.join(reserved)} cannot be "
                         "given (num_classes comes from the dataset; weights are never downloaded)")
    try:
        return torchvision.models.get_model(name, weights=None, num_classes=num_classes, **options)
    except (TypeError, ValueError, AssertionError) as err:
        # The constructor's own words name the culprit (``... got an unexpected keyword argument 'x'``);
        # a value of the wrong type or range fails inside it as TypeError, ValueError or assert.
        raise ValueError(f"model {TORCHVISION_PREFIX}{name} refuses options {dict(options)}: {err}") from None


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Every parameter registered meanwhile moves to the meta device; other tensors stay on the CPU.

    Patches ``nn.Module`` itself until the block ends, so no other thread may build modules meanwhile.
    """
    register = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None:
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register_on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def torchvision_problem(name: str, input_shape: Sequence[int] | None, options: Mapping[str, Any]) -> str | None:
    """What is wrong with building ``torchvision:name`` for ``input_shape`` (None: not known before the
    dataset is read; an ImageNet image is assumed) with ``options``, in one line.

    None if nothing is. Builds the model on the meta device (no memory, no forward pass), so checking
    even vgg19 is cheap.
    """
    if input_shape is None:
        input_shape = (3, 224, 224)
    try:
        try:
            with torch.device("meta"):
                build_torchvision(name, input_shape, 1000, **options)
        except NotImplementedError:
            # The constructor reads values of tensors it computed (regnet's block widths), which meta
            # tensors lack: compute on the CPU, but keep the weights (644M for regnet_y_128gf) on meta.
            with _parameters_on_meta():
                build_torchvision(name, input_shape, 1000, **options)
    except ValueError as err:
        return str(err)
    return None
