"""Every model and dataset a study can name: built-ins, torchvision's architectures, the user's own code.

A ``model:`` or ``dataset:`` is one of

- a built-in name (``models.MODEL_NAMES``, ``datasets.DATASET_NAMES``), whose
  options are declared with it;
- ``torchvision:NAME`` (models only): torchvision's architecture, no weights;
- an import reference ``package.module:factory`` or ``path/file.py:factory``
  (``references``) to the user's own factory:

      def my_model(input_shape: tuple[int, ...], num_classes: int, **options) -> torch.nn.Module
      def my_dataset(data_dir: pathlib.Path | None, seed: int, **options) -> workloads.DatasetPair

  A model maps a batch of ``input_shape`` samples to logits ``[B, num_classes]``
  (a language model: token ids ``[B, T]`` to ``[B, T, vocab]``, where
  ``input_shape == (T,)`` and ``num_classes`` is the vocabulary size). The
  options of torchvision models and of factories are the study's
  ``model_options`` / ``dataset_options``, checked against the signature.
"""
from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from . import references
from .dataset_types import DatasetPair
from .datasets import DATASETS, build_builtin_dataset
from .models import MODELS, build_builtin_model
from .torchvision_models import TORCHVISION_PREFIX, build_torchvision, torchvision_problem

BUILTIN, TORCHVISION, REFERENCE = "builtin", "torchvision", "reference"


def model_kind(name: str) -> str:
    """``builtin``, ``torchvision`` or ``reference``: how ``name`` is built and where its options are."""
    if name.startswith(TORCHVISION_PREFIX):
        return TORCHVISION
    return REFERENCE if references.is_reference(name) else BUILTIN


def dataset_kind(name: str) -> str:
    """``builtin`` or ``reference``."""
    return REFERENCE if references.is_reference(name) else BUILTIN


def _unknown(kind: str, name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    return f"unknown {kind} {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "") + \
        f"; valid: {', '.join(names)}"


def model_problem(name: str, options: Mapping[str, Any], input_shape: Sequence[int] | None = None) -> str | None:
    """What is wrong with building model ``name`` with ``options`` (the torchvision model's or the
    factory's own; built-ins' options are checked by their declarations); None: nothing found."""
    kind = model_kind(name)
    if kind == BUILTIN:
        return None if name in MODELS else _unknown("model", name, MODELS) + ", torchvision:NAME, or " \
                                                                           "MODULE:FACTORY / FILE.py:FACTORY"
    if kind == TORCHVISION:
        return torchvision_problem(name[len(TORCHVISION_PREFIX):], input_shape, dict(options))
    try:
        fn = references.factory(name)
    except references.ReferenceProblem as error:
        return str(error)
    return references.options_problem(name, fn, 2, options)


def dataset_problem(name: str, options: Mapping[str, Any]) -> str | None:
    """As ``model_problem``, for a dataset."""
    if dataset_kind(name) == BUILTIN:
        if name not in DATASETS:
            return _unknown("dataset", name, DATASETS) + ", or MODULE:FACTORY / FILE.py:FACTORY"
        return DATASETS[name].missing()  # a package it needs (image_folder: torchvision)
    try:
        fn = references.factory(name)
    except references.ReferenceProblem as error:
        return str(error)
    return references.options_problem(name, fn, 2, options)


def build_model(name: str, input_shape: Sequence[int], num_classes: int, **options: Any) -> nn.Module:
    """A freshly initialised model (weights from torch's global RNG: seed it for identical replicas)."""
    kind = model_kind(name)
    if kind == BUILTIN:
        return build_builtin_model(name, input_shape, num_classes, **options)
    if kind == TORCHVISION:
        return build_torchvision(name[len(TORCHVISION_PREFIX):], tuple(input_shape), num_classes, **options)
    problem = model_problem(name, options)
    if problem:
        raise ValueError(problem)
    model = references.factory(name)(tuple(input_shape), num_classes, **options)
    if not isinstance(model, nn.Module):
        raise ValueError(f"{name} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def build_dataset(name: str, *, data_dir: str | os.PathLike[str] | None = None, seed: int = 0,
                  **options: Any) -> DatasetPair:
    """Train and test data: held in memory (the small built-ins) or streamed (image folders, token files,
    a factory's torch Datasets). ``data_dir``: the dataset's files (``~`` expanded)."""
    directory = None if data_dir is None else Path(data_dir).expanduser()
    if dataset_kind(name) == BUILTIN:
        return build_builtin_dataset(name, data_dir=directory, seed=seed, **options)
    problem = dataset_problem(name, options)
    if problem:
        raise ValueError(problem)
    data = references.factory(name)(directory, seed, **options)
    if not isinstance(data, DatasetPair):
        raise ValueError(f"{name} returned a {type(data).__name__}, not a workloads.DatasetPair")
    return data


def sources(model: str, dataset: str, imports: Sequence[str] = ()) -> list[dict[str, str | None]]:
    """``{reference, file, sha256}`` of each piece of the user's code a trial runs: a MODULE:FACTORY or
    FILE.py:FACTORY model or dataset, and each module of ``imports``."""
    texts = [*([model] if model_kind(model) == REFERENCE else []),
             *([dataset] if dataset_kind(dataset) == REFERENCE else []), *imports]
    return [references.source(text) for text in texts]
