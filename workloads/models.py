"""The built-in models by name: ``build_builtin_model(name, input_shape, num_classes, **options)``

Image classifiers (mlp, lenet5, resnet*, vgg*, alexnet) map [B, *input_shape]
to logits [B, num_classes]; the language model gpt maps token ids [B, T] to
next-token logits [B, T, num_classes], num_classes being the vocabulary size.
Parameter counts of every model are listed in the docstring of its module
(mlp, lenet, resnet, vgg, alexnet: MNIST and CIFAR-10 inputs; gpt: bytes and
GPT-2 small).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from compressors.core.params import SHAPE, Param, resolve

from .alexnet import build_alexnet
from .gpt import build_gpt
from .lenet import build_lenet5
from .mlp import build_mlp
from .dataset_types import CLASSIFICATION, LANGUAGE_MODEL
from .options import Builder, call_builder, distinct_options
from .resnet import build_resnet18, build_resnet20, build_resnet50
from .vgg import HEADS, build_vgg11, build_vgg16

# None = the builder's own default, named in the doc.
WIDTH = Param("width", None, int, low=1, nullable=True, doc="mlp: units per hidden layer (null: 4096)")
DEPTH = Param("depth", None, int, low=0, nullable=True, doc="mlp: hidden layers, 0 = a linear model (null: 3)")
BATCH_NORM = Param("batch_norm", None, bool, nullable=True,
                   doc="vgg11/vgg16: BatchNorm after every convolution (null: true)")
HEAD = Param("head", None, str, choices=HEADS, nullable=True,
             doc="vgg11/vgg16: imagenet = 4096-4096 classifier, cifar = one linear layer (null: imagenet)")
N_LAYER = Param("n_layer", None, int, low=1, nullable=True, doc="gpt: transformer blocks (null: 2)")
N_HEAD = Param("n_head", None, int, low=1, nullable=True,
               doc="gpt: attention heads per block, dividing n_embd (null: 2)")
N_EMBD = Param("n_embd", None, int, low=1, nullable=True, doc="gpt: embedding width (null: 64)")
BLOCK_SIZE = Param("block_size", None, int, low=1, nullable=True,
                   doc="gpt: positions of the position embedding, at least the sequence length "
                       "(null: the sequence length)")
# Param has no open upper bound: the builder refuses 1.0 itself.
DROPOUT = Param("dropout", None, float, low=0, high=1, nullable=True,
                doc="gpt: dropout probability in [0, 1) of embeddings, attention and residual branches (null: 0)")

MODELS: dict[str, Builder] = {
    "mlp": Builder(build_mlp, (WIDTH, DEPTH)),
    "lenet5": Builder(build_lenet5),
    "resnet20": Builder(build_resnet20),
    "resnet18": Builder(build_resnet18),
    "resnet50": Builder(build_resnet50),
    "vgg11": Builder(build_vgg11, (BATCH_NORM, HEAD)),
    "vgg16": Builder(build_vgg16, (BATCH_NORM, HEAD)),
    "alexnet": Builder(build_alexnet),
    "gpt": Builder(build_gpt, (N_LAYER, N_HEAD, N_EMBD, BLOCK_SIZE, DROPOUT)),
}
MODEL_NAMES = tuple(MODELS)
# The task each built-in model serves.
MODEL_TASKS = {name: LANGUAGE_MODEL if name == "gpt" else CLASSIFICATION for name in MODELS}
MODEL_OPTIONS = distinct_options(MODELS)
_INPUT = (Param("input_shape", None, SHAPE), Param("num_classes", None, int, low=1))


def model_options(name: str) -> tuple[Param, ...]:
    """The options model ``name`` takes (ValueError for an unknown model)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid choices: {', '.join(MODELS)}")
    return MODELS[name].options


def build_builtin_model(name: str, input_shape: Sequence[int], num_classes: int, **options: Any) -> nn.Module:
    """A freshly initialised model mapping [B, *input_shape] to logits [B, num_classes] (gpt: token ids
    [B, T] to logits [B, T, num_classes], input_shape being (T,)).

    Options (None = default): see ``MODEL_OPTIONS`` (mlp: width, depth;
    vgg11/vgg16: batch_norm, head; gpt: n_layer, n_head, n_embd, block_size,
    dropout; others none). Unknown names or options raise ValueError listing
    the valid ones. Weights come from torch's global RNG: seed it
    (``torch.manual_seed``) for identical replicas.
    """
    shape = resolve("model input", _INPUT, {"input_shape": input_shape, "num_classes": num_classes})
    return call_builder("model", name, MODELS, (tuple(shape["input_shape"]), shape["num_classes"]), options)
