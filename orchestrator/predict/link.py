"""A probe's file as predict reads it (``lowprec predict --link FILE``): the link between a cluster's nodes that
``lowprec cluster probe`` measured (orchestrator/cluster/probe.py writes it): ``bandwidth_bps``, its largest
all_reduce's bus bandwidth in bits/s, and ``latency_s``, the latency per message."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Link:
    """What ``predict`` takes of a probe: each worker's link to the others, as the ring sees it."""
    bandwidth_bps: float  # bits per second each way: the largest all_reduce's bus bandwidth
    latency_s: float


def read_link(path: Path) -> Link:
    """The link a probe's file describes; ValueError, one line naming the file, where it is not one."""
    try:
        data = json.loads(Path(path).read_text())
        link = Link(float(data["bandwidth_bps"]), float(data["latency_s"]))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"--link {path} is not a probe's file of lowprec cluster probe ({error})") from None
    if not (0 < link.bandwidth_bps < math.inf and 0 <= link.latency_s < math.inf):
        raise ValueError(f"--link {path}: its bandwidth_bps must be above 0 and its latency_s at least 0, both "
                         f"finite, got {link.bandwidth_bps!r} and {link.latency_s!r}")
    return link
