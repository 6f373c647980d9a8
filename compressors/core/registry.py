"""Compressors by name and by wire id, with their parameters checked.

A leaf module: it imports no other module of the package but ``params``, so
that ``base`` (whose subclasses register here, and which makes a configured
codec: ``base.get``) and ``wire`` (which reads the ids) can both import it
without a circle. It holds the classes without naming their type: a codec
class is whatever ``base.Compressor`` declares.

Three kinds of methods register:

- payload codecs: every concrete ``Compressor`` subclass that sets ``name``
  registers itself when its class statement runs (``Compressor.__init_subclass__``
  calls :func:`register`), with its ``wire_id`` (the header's compressor id);
- hook-only methods, which only run as a DDP communication hook and have no
  payload of ours (PyTorch's PowerSGD): :func:`register_hook_method`;
- optimizer methods, which average inside the optimizer's step what it computes there, through a codec
  of their own choosing (1-bit Adam's momentum): :func:`register_optimizer_method`.

``import compressors`` imports every module of the package, so the registry
is complete before any of it is used.

What a method can do is answered here and nowhere else, from what each method
declares (its class attributes, or its ``register_hook_method`` call): the
algorithms it averages with and its default (:func:`algorithms`,
:func:`default_algorithm`, :func:`check_algorithm`), those it is offered over
where methods are compared (:func:`algorithm_choices`), whether it is hook-only
(:func:`hook_only`), which implementations it has and where each runs
(:func:`impls`, :func:`runs_on`, :func:`impl_problem`), and whether it is
plain DDP over an algorithm (:func:`plain_ddp`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .params import SEED, Param, resolve

# A codec class: a concrete subclass of ``compressors.core.base.Compressor``.
CodecClass = type

MAX_WIRE_ID = 255  # the header's compressor id is one byte; 0 is never valid

# Payload codecs by name, kept in ascending wire id order.
COMPRESSORS: dict[str, CodecClass] = {}
_BY_WIRE_ID: dict[int, CodecClass] = {}
# Hook-only methods: name -> declared parameters (SEED included), and what is wrong with a set of them
# that is valid one by one (None: nothing).
HOOK_METHODS: dict[str, tuple[Param, ...]] = {}
# Optimizer methods: name -> declared parameters (SEED included); their relations share _HOOK_RELATIONS.
OPTIMIZER_METHODS: dict[str, tuple[Param, ...]] = {}
_HOOK_RELATIONS: dict[str, Callable[[dict[str, Any]], str | None]] = {}

# How a method's gradients can be averaged (see ``compressors.comm.reducer``).
ALGORITHMS = ("allreduce", "allgather", "sra", "hierarchical")
# How a hierarchical average moves data inside a host, and across hosts.
INTRA_DTYPES = ("fp32", "fp16", "bf16")
INTER_ALGORITHMS = ("sra", "allgather")
# A codec's implementations: its kernels where it has them (Numba on CPUs, CUDA through CuPy), the torch
# reference, and auto (the kernels where the tensor's device has them, else the reference).
IMPLS = ("auto", "reference", "numba", "cuda")
# The device type each implementation runs on (None: any). The kernels are built for one device;
# auto picks per tensor and the reference is plain torch.
IMPL_DEVICES: dict[str, str | None] = {"auto": None, "reference": None, "numba": "cpu", "cuda": "cuda"}
# What the kernels of each implementation are called in messages.
KERNELS = {"numba": "Numba", "cuda": "CUDA"}


class RegistrationError(TypeError):
    """A compressor declaration is incomplete or clashes with one already registered."""


def register(cls: CodecClass) -> CodecClass:
    """Add a codec class under its ``name`` and ``wire_id``; a clash raises RegistrationError."""
    where = f"{cls.__module__}.{cls.__qualname__}"
    name = cls.__dict__.get("name")
    wire_id = cls.__dict__.get("wire_id")
    if not isinstance(name, str) or not name.isidentifier():
        raise RegistrationError(f"{where}: name must be an identifier-like string, got {name!r}")
    if not isinstance(wire_id, int) or isinstance(wire_id, bool) or not 1 <= wire_id <= MAX_WIRE_ID:
        raise RegistrationError(f"{where}: wire_id must be an int in [1, {MAX_WIRE_ID}] declared on the class "
                                f"itself, got {wire_id!r}")
    if name in COMPRESSORS or name in HOOK_METHODS or name in OPTIMIZER_METHODS:
        other = COMPRESSORS.get(name)
        owner = f"{other.__module__}.{other.__qualname__}" if other else "a hook-only or optimizer method"
        raise RegistrationError(f"{where}: compressor name {name!r} is already registered by {owner}")
    if wire_id in _BY_WIRE_ID:
        other = _BY_WIRE_ID[wire_id]
        raise RegistrationError(f"{where}: wire_id {wire_id} is already used by {other.name!r} "
                                f"({other.__module__}.{other.__qualname__}); unused: the lowest is {unused_wire_id()}")
    own = getattr(cls, "algorithms", None)
    if own is not None and (not own or not set(own) <= set(ALGORITHMS)):
        raise RegistrationError(f"{where}: algorithms must name some of {list(ALGORITHMS)}, got {own!r}")
    valid = _algorithms_of(cls)
    choices = getattr(cls, "algorithm_choices", None)
    if choices is not None and (_default_of(valid) not in choices or not set(choices) <= set(valid)):
        raise RegistrationError(f"{where}: algorithm_choices must name some of {list(valid)}, its default "
                                f"{_default_of(valid)!r} included, got {choices!r}")
    declared = tuple(cls.params) + (SEED,)
    for param in cls.params:
        if not isinstance(param, Param) or not param.doc:
            raise RegistrationError(f"{where}: every parameter needs a Param with a one-line doc, got {param!r}")
    if not cls.examples:
        raise RegistrationError(f"{where}: examples must list at least one parameter set (e.g. ({{}},))")
    for example in cls.examples:
        try:
            resolve(name, declared, example)
        except ValueError as err:
            raise RegistrationError(f"{where}: invalid example {example!r}: {err}") from None
    items = sorted([*COMPRESSORS.items(), (name, cls)], key=lambda item: item[1].wire_id)
    COMPRESSORS.clear()
    COMPRESSORS.update(items)
    _BY_WIRE_ID[wire_id] = cls
    return cls


def register_hook_method(name: str, params: tuple[Param, ...],
                         relations: Callable[[dict[str, Any]], str | None] | None = None) -> None:
    """Declare a method that only runs as a DDP hook (``params`` without SEED: it is added);
    ``relations`` says what is wrong with parameters valid one by one but not together."""
    _register_method(HOOK_METHODS, name, params, relations)


def register_optimizer_method(name: str, params: tuple[Param, ...],
                              relations: Callable[[dict[str, Any]], str | None] | None = None) -> None:
    """Declare a method that averages inside the optimizer's step (no DDP hook, no payload codec of its own);
    ``params`` and ``relations`` as ``register_hook_method``'s."""
    _register_method(OPTIMIZER_METHODS, name, params, relations)


def _register_method(kind: dict[str, tuple[Param, ...]], name: str, params: tuple[Param, ...],
                     relations: Callable[[dict[str, Any]], str | None] | None) -> None:
    if name in COMPRESSORS or name in HOOK_METHODS or name in OPTIMIZER_METHODS:
        raise RegistrationError(f"compressor name {name!r} is already registered")
    for param in params:
        if not param.doc:
            raise RegistrationError(f"{name}: parameter {param.name!r} needs a one-line doc")
    kind[name] = tuple(params) + (SEED,)
    if relations is not None:
        _HOOK_RELATIONS[name] = relations


def unused_wire_id() -> int:
    """The lowest wire id no compressor uses."""
    return next(i for i in range(1, MAX_WIRE_ID + 1) if i not in _BY_WIRE_ID)


def wire_id_of(name: str) -> int:
    """The header id of codec ``name`` (ValueError for a name that is not a payload codec)."""
    if name not in COMPRESSORS:
        raise _unknown(name)
    return COMPRESSORS[name].wire_id


def name_of_wire_id(wire_id: int) -> str | None:
    """The codec registered under ``wire_id``, or None."""
    cls = _BY_WIRE_ID.get(wire_id)
    return None if cls is None else cls.name


def names() -> tuple[str, ...]:
    """Every method: the codecs in wire id order, then the hook-only methods, then the optimizer methods."""
    return tuple(COMPRESSORS) + tuple(HOOK_METHODS) + tuple(OPTIMIZER_METHODS)


def casts() -> tuple[str, ...]:
    """The codecs whose payload body is a plain cast (``cast_dtype``): they can travel through a
    native all_reduce of the cast tensor."""
    return tuple(name for name, cls in COMPRESSORS.items() if cls.cast_dtype is not None)


def _unknown(name: Any) -> ValueError:
    return ValueError(f"unknown compressor {name!r}; valid: {list(names())}")


def params_of(name: str) -> tuple[Param, ...]:
    """The declared parameters of ``name``, SEED included (ValueError for an unknown name)."""
    if name in HOOK_METHODS:
        return HOOK_METHODS[name]
    if name in OPTIMIZER_METHODS:
        return OPTIMIZER_METHODS[name]
    if name not in COMPRESSORS:
        raise _unknown(name)
    return tuple(COMPRESSORS[name].params) + (SEED,)


def check_params(name: str, **params: Any) -> dict[str, Any]:
    """The full parameter dict of ``name`` (defaults filled, seed included), or ValueError."""
    resolved = resolve(name, params_of(name), params)
    if name in _HOOK_RELATIONS:
        problem = _HOOK_RELATIONS[name](resolved)
    else:
        problem = COMPRESSORS[name].relations(resolved) if name in COMPRESSORS else None
    if problem:
        raise ValueError(f"{name}: {problem}")
    return resolved


def codec_class(name: str) -> CodecClass:
    """The codec class registered as ``name`` (``base.get`` configures one); ValueError for a hook-only
    method or an unknown name."""
    if name in HOOK_METHODS:
        raise ValueError(f"{name} runs only as a DDP communication hook, it has no payload codec: "
                         f"use compressors.ddp.comm_hook({name!r})")
    if name in OPTIMIZER_METHODS:
        raise ValueError(f"{name} averages inside its optimizer's step, it has no payload codec: "
                         "see compressors.optim")
    if name not in COMPRESSORS:
        raise _unknown(name)
    return COMPRESSORS[name]


def hook_only(name: str) -> bool:
    """Whether ``name`` runs only as a DDP communication hook (no payload codec); False for an unknown name."""
    return name in HOOK_METHODS


def optimizer_method(name: str) -> bool:
    """Whether ``name`` averages inside its optimizer's step (no DDP hook); False for an unknown name."""
    return name in OPTIMIZER_METHODS


def own_communication(name: str) -> bool:
    """Whether ``name`` is no payload codec but a method with its own communication (a hook-only or an
    optimizer method): no algorithm to choose, nothing the performance model knows."""
    return name in HOOK_METHODS or name in OPTIMIZER_METHODS


def impls(name: str) -> tuple[str, ...]:
    """The implementations ``name`` has, in ``IMPLS`` order: auto and the reference always, numba and cuda
    where its class declares the kernels (``has_numba``, ``cuda_program``); a hook-only method has none."""
    if own_communication(name):  # PyTorch's hook, or the codec an optimizer method picks: no kernels of its own
        kernels = {}
    else:
        cls = codec_class(name)
        kernels = {"numba": cls.has_numba, "cuda": cls.cuda_program is not None}
    # An implementation that runs on any device (auto, the reference) needs no kernels.
    return tuple(impl for impl in IMPLS if IMPL_DEVICES[impl] is None or kernels.get(impl, False))


def runs_on(impl: str, device_type: str) -> bool:
    """Whether implementation ``impl`` runs on tensors of ``device_type`` ("cpu", "cuda", ...)."""
    return IMPL_DEVICES[impl] in (None, device_type)


def impl_problem(name: str, impl: str) -> str | None:
    """What is wrong with running ``name`` with ``impl`` (None: nothing; ValueError for an unknown name)."""
    if impl not in IMPLS:
        return f"{name}: impl must be one of {', '.join(IMPLS)}, got {impl!r}"
    if impl not in impls(name):
        return f"{name} has no {KERNELS[impl]} kernels: use impl 'reference' or 'auto'"
    return None


def has_numba(name: str) -> bool:
    """Whether ``name`` has Numba CPU kernels (``impl="numba"``); False for a hook-only or unknown name."""
    return name in COMPRESSORS and "numba" in impls(name)


def has_cuda(name: str) -> bool:
    """Whether ``name`` has CUDA kernels (``impl="cuda"``, ``compressors/cuda``); False for a hook-only or
    unknown name."""
    return name in COMPRESSORS and "cuda" in impls(name)


def owns_momentum(name: str) -> bool:
    """Whether ``name``'s memory keeps the momentum (DGC): the optimizer's must then be 0."""
    return name in COMPRESSORS and bool(getattr(COMPRESSORS[name], "owns_momentum", False))


def _algorithms_of(cls: CodecClass) -> tuple[str, ...]:
    if getattr(cls, "algorithms", None) is not None:
        return tuple(cls.algorithms)
    return ALGORITHMS if cls.cast_dtype is not None else ALGORITHMS[1:]


def _default_of(valid: tuple[str, ...]) -> str:
    return "sra" if "sra" in valid and "allreduce" not in valid else valid[0]


def algorithms(name: str) -> tuple[str, ...]:
    """The algorithms ``name`` can average with (the ``Reducer`` and the hooks take each): casts all four,
    other codecs allgather, sra and hierarchical unless the codec names its own, a hook-only or optimizer
    method only itself."""
    if own_communication(name):
        return (name,)
    return _algorithms_of(codec_class(name))


def default_algorithm(name: str) -> str:
    """allreduce for the casts, sra for the other codecs, a hook-only or optimizer method's own name for itself."""
    return _default_of(algorithms(name))


def algorithm_choices(name: str) -> tuple[str, ...]:
    """The algorithms ``name`` is offered over where methods are compared (a study's algorithm setting):
    those its class declares (``algorithm_choices``: the casts, the baselines, leave out the compressed
    collectives), else every one of ``algorithms``; none for a hook-only or optimizer method, whose one
    algorithm is itself (nothing to choose)."""
    if own_communication(name):
        return ()
    own = getattr(codec_class(name), "algorithm_choices", None)
    return tuple(own) if own is not None else algorithms(name)


def check_algorithm(name: str, algorithm: str | None) -> str:
    """``algorithm``, or ``name``'s default for None; ValueError naming the valid ones."""
    valid = algorithms(name)
    if algorithm is None:
        return default_algorithm(name)
    if algorithm not in valid:
        raise ValueError(f"algorithm {algorithm!r} is invalid for {name!r}; valid: {list(valid)}")
    return algorithm


def plain_ddp(name: str, algorithm: str | None = None) -> bool:
    """Whether averaging ``name`` over ``algorithm`` (None: its default) is what DDP does with no hook: the
    fp32 gradients in a native all_reduce, nothing to encode. False for an unknown name or algorithm."""
    cls = COMPRESSORS.get(name)
    return cls is not None and cls.cast_dtype == torch.float32 and (algorithm or default_algorithm(name)) == "allreduce"
