"""Compressors by name and by wire id, with their parameters checked.

A leaf module: it imports no other module of the package but ``params``, so
that ``base`` (whose subclasses register here, and which makes a configured
codec: ``base.get``) and ``wire`` (which reads the ids) can both import it
without a circle. It holds the classes without naming their type: a codec
class is whatever ``base.Compressor`` declares.

Two kinds of methods register:

- payload codecs: every concrete ``Compressor`` subclass that sets ``name``
  registers itself when its class statement runs (``Compressor.__init_subclass__``
  calls :func:`register`), with its ``wire_id`` (the header's compressor id);
- hook-only methods, which only run as a DDP communication hook and have no
  payload of ours (PyTorch's PowerSGD): :func:`register_hook_method`.

``import compressors`` imports every module of the package, so the registry
is complete before any of it is used.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
_HOOK_RELATIONS: dict[str, Callable[[dict[str, Any]], str | None]] = {}

# How a method's gradients can be averaged (see ``compressors.comm.reducer``).
ALGORITHMS = ("allreduce", "allgather", "sra", "hierarchical")
# How a hierarchical average moves data inside a host, and across hosts.
INTRA_DTYPES = ("fp32", "fp16", "bf16")
INTER_ALGORITHMS = ("sra", "allgather")


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
    if name in COMPRESSORS or name in HOOK_METHODS:
        other = COMPRESSORS.get(name)
        owner = f"{other.__module__}.{other.__qualname__}" if other else "a hook-only method"
        raise RegistrationError(f"{where}: compressor name {name!r} is already registered by {owner}")
    if wire_id in _BY_WIRE_ID:
        other = _BY_WIRE_ID[wire_id]
        raise RegistrationError(f"{where}: wire_id {wire_id} is already used by {other.name!r} "
                                f"({other.__module__}.{other.__qualname__}); unused: the lowest is {unused_wire_id()}")
    own = getattr(cls, "algorithms", None)
    if own is not None and (not own or not set(own) <= set(ALGORITHMS)):
        raise RegistrationError(f"{where}: algorithms must name some of {list(ALGORITHMS)}, got {own!r}")
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
    if name in COMPRESSORS or name in HOOK_METHODS:
        raise RegistrationError(f"compressor name {name!r} is already registered")
    for param in params:
        if not param.doc:
            raise RegistrationError(f"{name}: parameter {param.name!r} needs a one-line doc")
    HOOK_METHODS[name] = tuple(params) + (SEED,)
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
    """Every method: the codecs in wire id order, then the hook-only methods."""
    return tuple(COMPRESSORS) + tuple(HOOK_METHODS)


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
    if name not in COMPRESSORS:
        raise _unknown(name)
    return COMPRESSORS[name]


def has_numba(name: str) -> bool:
    """Whether ``name`` has Numba CPU kernels (``impl="numba"``); a hook-only method has none."""
    return name in COMPRESSORS and COMPRESSORS[name].has_numba


def owns_momentum(name: str) -> bool:
    """Whether ``name``'s memory keeps the momentum (DGC): the optimizer's must then be 0."""
    return name in COMPRESSORS and bool(getattr(COMPRESSORS[name], "owns_momentum", False))


def has_cuda(name: str) -> bool:
    """Whether ``name`` has CUDA kernels (``impl="cuda"``, ``compressors/cuda``); a hook-only method has none."""
    return name in COMPRESSORS and COMPRESSORS[name].cuda_program is not None


def algorithms(name: str) -> tuple[str, ...]:
    """The algorithms ``name`` can average with: casts all four, other codecs allgather, sra and
    hierarchical unless the codec names its own, a hook-only method only itself."""
    if name in HOOK_METHODS:
        return (name,)
    if name not in COMPRESSORS:
        raise _unknown(name)
    if getattr(COMPRESSORS[name], "algorithms", None) is not None:
        return tuple(COMPRESSORS[name].algorithms)
    return ALGORITHMS if COMPRESSORS[name].cast_dtype is not None else ALGORITHMS[1:]


def default_algorithm(name: str) -> str:
    """allreduce for the casts, sra for the other codecs, a hook-only method's own name for itself."""
    valid = algorithms(name)
    return "sra" if "sra" in valid and "allreduce" not in valid else valid[0]
