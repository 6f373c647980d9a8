"""Pipelined programs in one process (compressors/comm/pipeline.py): ``run`` waits for each stage's
collective, a ``Pipeline`` runs later stages in launch order whatever order collectives complete in.
"""
from __future__ import annotations

import pytest
import torch

from compressors.comm import pipeline


def test_run_waits_for_each_collective_and_returns_the_programs_value():
    def program():
        first = yield None
        second = yield None
        return (first <= second, "done")

    assert pipeline.run(program()) == (True, "done")


def test_a_pipeline_runs_later_stages_in_launch_order():
    """Without collectives every stage completes at once; stage 1 of each program still runs after
    stage 1 of the one launched before, and a failing program fails its own future only."""
    order: list[tuple[str, int]] = []

    def program(name, fail=False):
        order.append((name, 0))
        yield None
        order.append((name, 1))
        if fail:
            raise ValueError(f"{name} broke")
        yield None
        order.append((name, 2))
        return name

    line = pipeline.Pipeline()
    futures = [line.launch(program("a")), line.launch(program("b", fail=True)), line.launch(program("c"))]
    assert futures[0].wait() == "a" and futures[2].wait() == "c"
    with pytest.raises(ValueError, match="b broke"):
        futures[1].wait()
    for stage in (1, 2):
        names = [n for n, s in order if s == stage]
        assert names == sorted(names)


class _Pending:
    """A stand-in for a collective in flight: ``complete()`` completes it."""

    def __init__(self) -> None:
        self.future = torch.futures.Future()

    def get_future(self) -> torch.futures.Future:
        return self.future

    def complete(self) -> None:
        self.future.set_result(None)


def test_later_stages_keep_launch_order_when_collectives_complete_out_of_order():
    """B's collective completes before A's, and an empty program sits between them: B's second stage
    (where sra starts its all_gather) must still run after A's."""
    order: list[str] = []
    works = {"a": _Pending(), "b": _Pending()}

    def program(name):
        yield works[name]
        order.append(name)
        return name

    def empty():
        return "empty"
        yield  # a generator that ends at once: nothing to send

    line = pipeline.Pipeline()
    futures = [line.launch(program("a")), line.launch(empty()), line.launch(program("b"))]
    works["b"].complete()
    assert order == [] and not futures[2].done()
    works["a"].complete()
    assert order == ["a", "b"]
    assert [f.wait() for f in futures] == ["a", "empty", "b"]
