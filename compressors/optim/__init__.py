"""Optimizers that average across the workers inside their own step, through a ``Reducer``, instead of
DDP averaging the gradients in backward:

- ``onebit_adam``: 1-bit Adam, ``OnebitAdam`` (registered as the method ``onebit_adam``): Adam's warm-up,
  then the variance frozen and only the momentum sent, compressed.
"""
from .onebit_adam import ONEBIT_ADAM, WARMUP_PERCENT, OnebitAdam, warmup_steps_of

__all__ = ["ONEBIT_ADAM", "OnebitAdam", "WARMUP_PERCENT", "warmup_steps_of"]
