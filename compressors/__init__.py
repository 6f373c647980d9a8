"""Gradient compressors, error feedback, and compressed collectives.

Knows nothing of Ray, YAML or workloads: torch tensors (CPU or CUDA) in,
payloads (flat uint8 tensors) out.
"""
from .base import Compressor
from .collectives import StepStats
from .feedback import ErrorFeedback
from .reducer import ALGORITHMS, Reducer, algorithms, default_algorithm
from .registry import COMPRESSORS, NAMES, NATIVE, check_params, get
from .wire import PayloadError

__all__ = ["ALGORITHMS", "COMPRESSORS", "Reducer", "StepStats", "algorithms", "default_algorithm", "NAMES", "NATIVE", "Compressor", "ErrorFeedback", "PayloadError", "check_params", "get"]
