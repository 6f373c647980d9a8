"""The emulated network's names, addresses, commands and shaping (orchestrator/cluster/netns.py), without root.
"""
from __future__ import annotations

import subprocess

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
    ("LP", "198.18.0", 2, "prefix .*got 'LP'"), ("lp-x", "198.18.0", 2, "prefix"), ("lpabcdefg", "198.18.0", 2, "prefix"),
    ("lp", "10.0.0", 2, "198.18.0.0/15"), ("lp", "198.20.0", 2, "198.18.0.0/15"), ("lp", "198.18", 2, "subnet"),
    ("lp", "198.18.0", 0, "hosts"), ("lp", "198.18.0", 251, "hosts")])
def test_a_network_outside_the_benchmark_range_or_badly_named_is_refused(prefix, subnet, hosts, match):
    with pytest.raises(ValueError, match=match):
        Network(prefix, subnet, hosts)
    Network("lp", "198.19.255", 2)  # the top of the range is in it


@pytest.mark.parametrize("prefix", ["..", "../x", "x/..", "/", "qa?z", "*", "lp*", "[a-z]", "lp-h0", "", "lp\n", None, 1])
def test_a_prefix_that_is_a_path_or_a_pattern_is_refused(prefix):
    assert netns.prefix_problem(prefix) == ("must be a lowercase letter and up to 7 more lowercase letters or digits, "
                                            "like lp")
    with pytest.raises(ValueError, match="^prefix must be a lowercase letter"):
        Network(prefix, "198.18.0", 2)


def test_a_prefix_of_letters_and_digits_is_accepted():
    assert [netns.prefix_problem(p) for p in ("lp", "lpsweep", "a1234567")] == [None, None, None]


def test_delete_removes_only_the_recorded_namespaces_that_have_their_recorded_inode(tmp_path, monkeypatch):
    """Stand-in namespaces are files (their inodes are what is compared); `ip netns del` is recorded, not run."""
    monkeypatch.setattr(netns, "NETNS_DIR", tmp_path)
    for name in ("qaz-h0", "qaz-h1", "qaz-sw", "qazz-h0"):
        (tmp_path / name).touch()
    inode = {name: netns.netns_inode(tmp_path / name) for name in ("qaz-h0", "qaz-sw")}
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kwargs: ran.append(argv))
    # qaz-h1 is in the record with another inode (its name was made again by hand): not ours any more
    removed = Network("qaz", "198.18.7", 2).delete({"qaz-h0": inode["qaz-h0"], "qaz-h1": 1, "qaz-sw": inode["qaz-sw"]})
    assert removed == ["qaz-h0", "qaz-sw"]
    assert ran == [["ip", "netns", "del", "qaz-h0"], ["ip", "netns", "del", "qaz-sw"]]
