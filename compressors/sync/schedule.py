"""Streaming DiLoCo's fragments and their staggered schedule (Douillard et al. 2025, arXiv 2501.18512).

The parameters, in the model's order, are cut into ``fragments`` contiguous groups of about equal size;
fragment f is exchanged after the steps s (counted from 1) where s + offset(f) is a multiple of
``inner_steps``, offset(f) = floor(f * inner_steps / fragments): each fragment every inner_steps steps,
the fragments spread evenly between (a gap of at least ``min_gap``). With one fragment every parameter
is exchanged together, every inner_steps steps (DiLoCo, local SGD).
"""
from __future__ import annotations


def split_fragments(numels: list[int], fragments: int) -> list[list[int]]:
    """The parameter indices of each fragment: contiguous runs of ``numels`` (each parameter's element
    count), cut where the running total passes each k / fragments of the whole; every fragment holds at
    least one parameter. ValueError where there are fewer parameters than fragments."""
    if fragments < 1:
        raise ValueError(f"fragments must be >= 1, got {fragments}")
    if len(numels) < fragments:
        raise ValueError(f"{fragments} fragments need at least as many parameter tensors; the model has "
                         f"{len(numels)}")
    total, cuts, running = sum(numels), [], 0
    for i, n in enumerate(numels):
        running += n
        left = len(numels) - i - 1  # parameters still to place
        wanted = len(cuts) + 1  # the fragment this parameter may close
        if wanted < fragments and (running * fragments >= wanted * total or left == fragments - wanted):
            cuts.append(i + 1)
    bounds = [0, *cuts, len(numels)]
    return [list(range(bounds[k], bounds[k + 1])) for k in range(fragments)]


def min_gap(inner_steps: int, fragments: int) -> int:
    """The fewest steps between two exchanges on the schedule: floor(inner_steps / fragments)."""
    return inner_steps // fragments


def due_fragments(step: int, inner_steps: int, fragments: int) -> list[int]:
    """The fragments exchanged after step ``step`` (from 1): f where step + floor(f * inner_steps / fragments)
    is a multiple of inner_steps (``inner_steps`` >= ``fragments``)."""
    return [f for f in range(fragments) if (step + f * inner_steps // fragments) % inner_steps == 0]
