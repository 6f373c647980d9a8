"""Gradient compressors, error feedback, compressed collectives and DDP hooks.

Knows nothing of Ray, YAML or workloads: torch tensors (CPU or CUDA) in,
payloads (flat uint8 tensors) out. By role:

- ``core``: what every codec shares: the interface (``base``), the registry,
  the wire format, parameter declarations and numeric helpers;
- ``codecs``: one module per method or family; importing the package
  registers every codec in it, so adding a method is adding one module there;
- ``kernels`` (Numba, CPU) and ``cuda`` (CUDA C through CuPy): the codecs'
  fast implementations;
- ``comm``: the ``Reducer``, the compressed collectives, error feedback and
  the accounting of bytes and time;
- ``ddp``: PyTorch DDP communication hooks over ``comm``;
- ``optim``: optimizers that average inside their own step over ``comm`` (1-bit Adam).
"""
from . import codecs  # noqa: F401  (registers every codec)
from . import ddp
from . import optim  # noqa: F401  (registers the optimizer methods)
from .core import registry
from .core.base import Compressor, get
from .comm.feedback import ErrorFeedback
from .comm.reducer import Reducer
from .core.registry import (
    ALGORITHMS, COMPRESSORS, IMPLS, INTER_ALGORITHMS, INTRA_DTYPES, algorithms, check_params, default_algorithm,
    has_cuda, has_numba, hook_only, impls, owns_momentum, params_of, plain_ddp, runs_on,
)
from .comm.stats import StepStats
from .core.wire import PayloadError

# The built-in methods: the codecs in wire id order, then the hook-only ones (powersgd), then the optimizer
# methods (onebit_adam). ``names()`` also has those a user's module registered since.
NAMES: tuple[str, ...] = registry.names()
names = registry.names
# The codecs that send a plain cast, so they can travel through a native all_reduce.
CASTS: tuple[str, ...] = registry.casts()

__all__ = ["ALGORITHMS", "INTER_ALGORITHMS", "INTRA_DTYPES", "CASTS", "COMPRESSORS", "IMPLS", "NAMES", "Compressor",
           "ErrorFeedback", "PayloadError", "Reducer", "StepStats", "algorithms", "check_params", "ddp",
           "default_algorithm", "get", "has_cuda", "has_numba", "hook_only", "impls", "names", "owns_momentum",
           "params_of", "plain_ddp", "runs_on"]
