"""What the ``Reducer`` and the DDP hooks both check, in one place: the options of an average (against what
the registry says the method can do), the topology it runs over, and a checkpoint's configuration."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import registry
from .topology import Topology


@dataclass(frozen=True)
class Options:
    """What checking the options resolves: ``algorithm`` is the method's default where none was given,
    ``momentum`` 0.9 by default for a method that keeps it in its memory, None for the others."""

    algorithm: str
    momentum: float | None


def check_options(compressor: str, algorithm: str | None = None, *, min_compress_numel: int = 1024,
                  impl: str = "auto", intra: str = "fp32", inter: str = "sra",
                  momentum: float | None = None) -> Options:
    """``compressor``'s options, checked; ValueError names the valid values (an unknown compressor too)."""
    algorithm = registry.check_algorithm(compressor, algorithm)
    if min_compress_numel < 0:
        raise ValueError(f"min_compress_numel={min_compress_numel!r} is invalid; valid: an int >= 0")
    problem = registry.impl_problem(compressor, impl)
    if problem:
        raise ValueError(problem)
    if intra not in registry.INTRA_DTYPES or inter not in registry.INTER_ALGORITHMS:
        raise ValueError(f"intra must be one of {list(registry.INTRA_DTYPES)} and inter one of "
                         f"{list(registry.INTER_ALGORITHMS)}, got {intra!r}, {inter!r}")
    if registry.owns_momentum(compressor):
        momentum = 0.9 if momentum is None else momentum
        if isinstance(momentum, bool) or not (isinstance(momentum, (int, float)) and 0 <= momentum <= 1):
            raise ValueError(f"momentum={momentum!r} is invalid; valid: a float in [0, 1]")
        momentum = float(momentum)
    elif momentum is not None:
        raise ValueError(f"momentum is for a method that keeps it in its memory (dgc), not {compressor!r}: "
                         "give it to the optimizer")
    return Options(algorithm, momentum)


def topology_of(topology: Topology | None, world: int) -> Topology:
    """``topology`` (default: every rank a host of its own); ValueError where it names another number of ranks."""
    topology = topology if topology is not None else Topology.flat(world)
    if topology.world != world:
        raise ValueError(f"the topology names {topology.world} ranks; the group has {world}")
    return topology


def checkpoint(compressor: str, algorithm: str, step: int) -> dict[str, Any]:
    """What every average's checkpoint holds: its configuration and its finished steps."""
    return {"compressor": compressor, "algorithm": algorithm, "step": step}


def checkpoint_step(state: dict[str, Any], compressor: str, algorithm: str) -> int:
    """The finished steps of checkpoint ``state``; ValueError where it is another configuration's."""
    if (state["compressor"], state["algorithm"]) != (compressor, algorithm):
        raise ValueError(f"state of {state['compressor']}/{state['algorithm']} cannot be loaded into "
                         f"{compressor}/{algorithm}")
    return state["step"]
