"""Can a trial's workers be placed on the cluster at all? (no Ray; the runner asks Ray for the nodes)

Ray waits forever for a placement group that no node set can hold, and Ray
Train only checks the request against an autoscaler's configuration, which a
fixed cluster (``ray start``, a local Ray) has none of. So before a trial
starts its workers, its request is compared with the resources of the nodes
that are alive: ``num_workers`` identical bundles, each on one node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

# Ray accounts resources in units of 1/10,000; compare with that slack so that
# 0.49 * 2 + 0.01 fits into 1.0.
_SLACK = 1e-4


def workers_that_fit(per_worker: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> int:
    """How many bundles of ``per_worker`` the ``nodes`` (each a resource -> quantity map) can hold.

    Every bundle must fit on one node, so a node holds the floor of its quantity over the
    request for its scarcest resource; for identical bundles this greedy count is exact.
    """
    total = 0
    for node in nodes:
        fits = [math.floor((node.get(name, 0.0) + _SLACK) / amount)
                for name, amount in per_worker.items() if amount > 0]
        total += max(0, min(fits)) if fits else 0
    return total


def placement_problem(num_workers: int, per_worker: Mapping[str, float],
                      nodes: Sequence[Mapping[str, float]]) -> str | None:
    """Why ``num_workers`` workers of ``per_worker`` resources can never be placed on ``nodes``; None if
    they can (once the resources other trials hold are free)."""
    fit = workers_that_fit(per_worker, nodes)
    if fit >= num_workers:
        return None
    request = ", ".join(f"{name} {amount:g}" for name, amount in per_worker.items())
    totals = {name: sum(node.get(name, 0.0) for node in nodes) for name in per_worker}
    have = ", ".join(f"{name} {total:g}" for name, total in totals.items())
    return (f"cannot place {num_workers} workers of {{{request}}} each: the cluster's {len(nodes)} alive "
            f"node(s) hold at most {fit} such workers (in all: {have}); lower num_workers or the "
            f"per-worker resources, or add nodes")
