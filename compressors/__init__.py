"""Gradient compressors, error feedback, compressed collectives and DDP hooks.

Knows nothing of Ray, YAML or workloads: torch tensors (CPU or CUDA) in,
payloads (flat uint8 tensors) out.

Importing the package imports every module in it, so that every compressor
class has registered itself (see ``registry``) before anything is used:
adding a compressor is adding one module that defines a ``Compressor``
subclass with ``name``, ``wire_id``, ``params`` and ``examples``; no list of
modules or names needs editing.
"""
import importlib as _importlib
import pkgutil as _pkgutil

for _info in _pkgutil.iter_modules(__path__):
    _importlib.import_module(f"{__name__}.{_info.name}")
del _info

from . import ddp, registry  # noqa: E402
from .base import IMPLS, Compressor  # noqa: E402
from .feedback import ErrorFeedback  # noqa: E402
from .reducer import Reducer  # noqa: E402
from .registry import (  # noqa: E402
    ALGORITHMS, COMPRESSORS, algorithms, check_params, default_algorithm, get, has_cuda, has_numba, params_of,
)
from .stats import StepStats  # noqa: E402
from .wire import PayloadError  # noqa: E402

# Every method: the codecs in wire id order, then the hook-only ones (powersgd).
NAMES: tuple[str, ...] = registry.names()
# The codecs that send a plain cast, so they can travel through a native all_reduce.
CASTS: tuple[str, ...] = registry.casts()

__all__ = ["ALGORITHMS", "CASTS", "COMPRESSORS", "IMPLS", "NAMES", "Compressor", "ErrorFeedback", "PayloadError",
           "Reducer", "StepStats", "algorithms", "check_params", "ddp", "default_algorithm", "get", "has_cuda", "has_numba",
           "params_of"]
