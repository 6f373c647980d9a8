"""The workload's settings checked together: the model and the dataset exist, take the options they are
given (a built-in's as workload keys, the others' as model_options / dataset_options), suit each other
and the samples' shape. ``settings.relation_problems`` yields these among the others."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch

import workloads


def workload_problems(settings: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """The model's and the dataset's problems: unknown names, factories that cannot be imported, options
    they do not take (a built-in's as workload keys, the others' as model_options / dataset_options)."""
    for owner in ("model", "dataset"):
        name, extra = settings[owner], f"{owner}_options"
        builtin = (workloads.model_kind if owner == "model" else workloads.dataset_kind)(name) == workloads.BUILTIN
        every = workloads.MODEL_OPTIONS if owner == "model" else workloads.DATASET_OPTIONS
        if builtin:  # its options are workload keys
            known = name in (workloads.MODEL_NAMES if owner == "model" else workloads.DATASET_NAMES)
            taken = {p.name for p in (workloads.model_options if owner == "model" else workloads.dataset_options)(name)} \
                if known else set()
            for p in every:
                if settings.get(p.name) is not None and known and p.name not in taken:
                    yield p.name, f"{owner} {name!r} takes no option {p.name!r}"
            if settings.get(extra) is not None:
                yield extra, (f"{owner} {name!r} is built in: its options are workload keys "
                              f"({', '.join(sorted(taken)) or 'it has none'}); {extra} is for "
                              + ("torchvision:NAME and " if owner == "model" else "") + "MODULE:FACTORY ones")
        # The name first (a file that cannot be imported, no such factory), then the options it is given.
        check = (lambda options: workloads.model_problem(name, options, settings.get("input_shape"))) \
            if owner == "model" else (lambda options: workloads.dataset_problem(name, options))
        problem = check({})
        if problem:
            yield owner, problem
        elif settings.get(extra) and (problem := check(settings[extra])):
            yield extra, problem
        if not builtin:
            for p in every:
                if settings.get(p.name) is not None:
                    yield p.name, f"{owner} {name!r} takes its options in {extra}, not as the workload key {p.name!r}"
    if settings["dataset"] == "synthetic" and settings.get("input_shape") is not None \
            and workloads.model_kind(settings["model"]) == workloads.BUILTIN and settings["model"] in workloads.MODEL_NAMES:
        problem = _input_problem(settings["model"], tuple(settings["input_shape"]))
        if problem:
            yield "input_shape", problem
    model_task = workloads.MODEL_TASKS.get(settings["model"])
    data_task = workloads.DATASET_TASKS.get(settings["dataset"])
    if model_task and data_task and model_task != data_task:
        yield "model", (f"model {settings['model']!r} serves {model_task} and dataset {settings['dataset']!r} "
                        f"{data_task}: pair gpt with python_source or tokens, the other models with "
                        + ", ".join(n for n, t in workloads.DATASET_TASKS.items() if t == workloads.CLASSIFICATION))
    data_dir = workloads.DATA_DIR.get(settings["dataset"], "optional")  # a factory decides for itself
    if settings.get("data_dir") is not None and data_dir is None:
        yield "data_dir", f"dataset {settings['dataset']!r} reads no files; leave data_dir unset"
    if settings.get("data_dir") is None and data_dir == "required":
        yield "data_dir", f"dataset {settings['dataset']!r} needs data_dir (the folder of its files)"


@functools.cache
def _input_problem(model: str, input_shape: tuple[int, ...]) -> str | None:
    """What ``model`` says of samples of ``input_shape`` (None: it takes them); built on the meta device,
    which allocates nothing."""
    try:
        with torch.device("meta"):
            workloads.build_model(model, input_shape, 2)
    except ValueError as error:
        return str(error)
    return None
