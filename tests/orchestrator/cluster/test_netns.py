"""The emulated network's names, addresses, commands and shaping (orchestrator/cluster/netns.py), without root.
"""
from __future__ import annotations

import pytest

from orchestrator.cluster import netns
from orchestrator.cluster.netns import Network


def test_burst_holds_two_gso_packets_or_one_millisecond():
    assert netns.burst_bytes("100mbit") == 131072
    assert netns.burst_bytes("1gbit") == 131072
    assert netns.burst_bytes("10gbit") == 1_250_000


def test_network_names_addresses_and_commands():
    network = Network("lpt", "198.18.7", 3)
    assert network.names == ["lpt-h0", "lpt-h1", "lpt-h2", "lpt-sw"]
    assert [network.address(i) for i in range(3)] == ["198.18.7.1", "198.18.7.2", "198.18.7.3"]
    assert network.command(1, ["ray", "status"], {"A": "1"}) == ["ip", "netns", "exec", "lpt-h1", "env", "A=1",
                                                                 "ray", "status"]


@pytest.mark.parametrize("prefix, subnet, hosts, match", [
    ("LP", "198.18.0", 2, "prefix 'LP'"), ("lp-x", "198.18.0", 2, "prefix"), ("lpabcdefg", "198.18.0", 2, "prefix"),
    ("lp", "10.0.0", 2, "198.18.0.0/15"), ("lp", "198.20.0", 2, "198.18.0.0/15"), ("lp", "198.18", 2, "subnet"),
    ("lp", "198.18.0", 0, "hosts"), ("lp", "198.18.0", 251, "hosts")])
def test_a_network_outside_the_benchmark_range_or_badly_named_is_refused(prefix, subnet, hosts, match):
    with pytest.raises(ValueError, match=match):
        Network(prefix, subnet, hosts)
    Network("lp", "198.19.255", 2)  # the top of the range is in it
