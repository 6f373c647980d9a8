"""Communicating every ``inner_steps`` steps instead of every step: local SGD, DiLoCo and Streaming
DiLoCo, whose outer exchange is a ``Reducer``'s average, so every codec and error feedback work there.

- ``schedule``: which parameters make up each fragment, and at which steps each is exchanged;
- ``outer``: ``OuterSync``, the outer loop a training loop calls after each optimizer step.
"""
from .outer import MERGE_ALPHA, OuterSync
from .schedule import due_fragments, min_gap, split_fragments

__all__ = ["MERGE_ALPHA", "OuterSync", "due_fragments", "min_gap", "split_fragments"]
