"""Placing a trial's workers (orchestrator/study/placement.py): whole bundles per node, and a request
that cannot be placed named with what the cluster has.
"""
from __future__ import annotations

import pytest


def test_workers_that_fit_count_whole_bundles_per_node():
    from orchestrator.study.placement import workers_that_fit

    assert workers_that_fit({"CPU": 0.49}, [{"CPU": 1.99}]) == 4  # Ray's 1e-4 units: 4 * 0.49 <= 1.99
    assert workers_that_fit({"CPU": 2.0}, [{"CPU": 1.5}, {"CPU": 1.5}]) == 0  # 3 CPUs, no node holds 2
    assert workers_that_fit({"CPU": 1.0, "GPU": 1.0}, [{"CPU": 8.0, "GPU": 2.0}, {"CPU": 8.0}]) == 2
    assert workers_that_fit({"CPU": 1.0}, []) == 0


@pytest.mark.parametrize("num_workers, per_worker, words", [
    (10_000, {"CPU": 1.0}, ["cannot place 10000 workers of {CPU 1} each", "at most 2 such workers",
                            "in all: CPU 2"]),
    (1, {"CPU": 1.0, "GPU": 1.0}, ["cannot place 1 workers of {CPU 1, GPU 1}", "at most 0", "GPU 0"]),
])
def test_an_unplaceable_request_is_named_with_what_the_cluster_has(num_workers, per_worker, words):
    from orchestrator.study.placement import placement_problem

    problem = placement_problem(num_workers, per_worker, [{"CPU": 2.0, "memory": 1e9}])
    for word in words:
        assert word in problem, problem
    assert placement_problem(2, {"CPU": 1.0}, [{"CPU": 2.0}]) is None
