"""Streaming DiLoCo's fragments (compressors/sync/schedule.py): contiguous, balanced, never empty, and on
the staggered schedule every parameter is exchanged exactly once per inner_steps steps, one fragment at a
time, evenly spread."""
from __future__ import annotations

import itertools

import pytest

from compressors.sync import due_fragments, min_gap, split_fragments


@pytest.mark.parametrize("numels", [[5], [1, 1, 1, 1], [100, 1, 1, 1], [1, 1, 1, 100], [10, 20, 30, 40, 50, 60],
                                    [7] * 13])
@pytest.mark.parametrize("fragments", [1, 2, 3, 4])
def test_fragments_are_contiguous_nonempty_runs_that_cover_every_parameter_once(numels, fragments):
    if fragments > len(numels):
        with pytest.raises(ValueError, match="fragments need at least as many parameter tensors"):
            split_fragments(numels, fragments)
        return
    parts = split_fragments(numels, fragments)
    assert len(parts) == fragments and all(parts)
    assert list(itertools.chain.from_iterable(parts)) == list(range(len(numels)))


def test_fragments_of_equal_parameters_hold_equal_shares():
    assert split_fragments([7] * 12, 4) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert split_fragments([10, 20, 30, 40], 2) == [[0, 1, 2], [3]]  # 60 | 40: the first run reaches half


@pytest.mark.parametrize("inner_steps,fragments", [(1, 1), (6, 1), (6, 2), (6, 3), (6, 6), (8, 4), (50, 4),
                                                    (50, 5), (7, 3)])
def test_each_fragment_is_exchanged_once_every_inner_steps_the_fragments_spread_evenly(inner_steps, fragments):
    seen = {f: [] for f in range(fragments)}
    exchanges = []
    for step in range(1, 4 * inner_steps + 1):
        due = due_fragments(step, inner_steps, fragments)
        assert len(due) <= 1  # one fragment a step at most
        exchanges += [step] * len(due)
        for f in due:
            seen[f].append(step)
    for f, steps in seen.items():
        # once in every window of inner_steps steps, at the same phase
        assert [b - a for a, b in zip(steps, steps[1:])] == [inner_steps] * (len(steps) - 1)
        assert len(steps) == 4
    # fragment 0 at the multiples of inner_steps; the others before it, spread evenly: gaps of
    # floor or ceil of inner_steps / fragments, never below min_gap
    assert seen[0][0] == inner_steps
    gaps = {b - a for a, b in zip(exchanges, exchanges[1:])}
    assert gaps <= {inner_steps // fragments, -(-inner_steps // fragments)}
    assert min(gaps, default=inner_steps) >= min_gap(inner_steps, fragments)
