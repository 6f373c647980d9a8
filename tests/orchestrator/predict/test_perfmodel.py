"""The performance model (orchestrator/predict/perfmodel.py) on hand-computed cases: collective costs,
on one link and on a cluster of multi-worker hosts (two links), the hierarchical average's parts, a step's
timeline with and without overlap, the speedup bound and the break-even bandwidth.
"""
from __future__ import annotations

import pytest

from orchestrator.predict import perfmodel

LINK = perfmodel.Link(bandwidth=1e6, latency=1e-3)  # 1 MB/s, 1 ms per message


def test_collective_costs_follow_the_formulas():
    # ring: 2(p-1) alpha + 2(p-1)/p M/B + (p-1)/p M/R
    assert perfmodel.ring_allreduce_s(4e6, 4, LINK, reduction_rate=1e9) == pytest.approx(6e-3 + 6.0 + 3e-3)
    assert perfmodel.allgather_s(1e5, 4, LINK) == pytest.approx(3e-3 + 0.3)
    assert perfmodel.alltoall_s(3e5, 4, LINK) == pytest.approx(3e-3 + 0.3)
    for cost in (perfmodel.ring_allreduce_s(4e6, 1, LINK), perfmodel.allgather_s(1e5, 1, LINK),
                 perfmodel.alltoall_s(0, 4, LINK)):
        assert cost == 0.0


# 2 hosts x 2 workers: 100 Mbit/s (12.5 MB/s) and 1 ms per message between hosts, 2400 Gbit/s (300 GB/s) and no
# latency inside one
INTER, INTRA = perfmodel.Link(bandwidth=12.5e6, latency=1e-3), perfmodel.Link(bandwidth=3e11)
TWO_BY_TWO = perfmodel.Cluster(hosts=2, workers_per_host=2, inter=INTER, intra=INTRA)


def test_flat_collectives_on_two_links():
    assert TWO_BY_TWO.workers == 4
    # a ring over the 4 ranks crosses hosts, at the inter link's pace: 2(p-1) alpha + 2(p-1)/p M/B + (p-1)/p M/R
    assert perfmodel.flat_ring_allreduce_s(1e6, TWO_BY_TWO, 1e9) == pytest.approx(6e-3 + 0.12 + 7.5e-4, rel=1e-12)
    # all_gather of 100 kB a rank: the 2 payloads from the other host (2 ms + 2 x 8 ms) and the 1 from this host
    # (1e5 / 3e11 s) arrive at once: the longer
    assert perfmodel.flat_allgather_s(1e5, TWO_BY_TWO) == pytest.approx(2e-3 + 0.016, rel=1e-12)
    # all_to_all sending 300 kB: 2/3 of it to the other host (2 ms + 16 ms), 1/3 inside
    assert perfmodel.flat_alltoall_s(3e5, TWO_BY_TWO) == pytest.approx(2e-3 + 0.016, rel=1e-12)
    # where the link inside a host is the slower (10 kB/s), its share sets the time: 1e5 B / 1e4 B/s
    slow_inside = perfmodel.Cluster(2, 2, INTER, perfmodel.Link(1e4))
    assert perfmodel.flat_alltoall_s(3e5, slow_inside) == pytest.approx(10.0, rel=1e-12)
    assert perfmodel.flat_allgather_s(1e5, slow_inside) == pytest.approx(10.0, rel=1e-12)
    # one host of 4: nothing crosses hosts
    one_host = perfmodel.Cluster(1, 4, INTER, INTRA)
    assert perfmodel.flat_ring_allreduce_s(1e6, one_host, 1e9) == pytest.approx(1.5e6 / 3e11 + 7.5e-4, rel=1e-12)
    assert perfmodel.flat_allgather_s(1e5, one_host) == pytest.approx(3e5 / 3e11, rel=1e-12)
    assert perfmodel.flat_alltoall_s(3e5, one_host) == pytest.approx(3e5 / 3e11, rel=1e-12)


def test_a_host_whose_workers_share_one_link_sends_across_at_its_share():
    shared = perfmodel.Cluster(2, 2, INTER, INTRA, shared_link=True)
    assert shared.across == perfmodel.Link(6.25e6, 1e-3)  # each of the 2 workers gets half of 12.5 MB/s
    assert TWO_BY_TWO.across == INTER
    # all_gather of 100 kB a rank: the 2 payloads from the other host at half the rate (2 ms + 2 x 16 ms)
    assert perfmodel.flat_allgather_s(1e5, shared) == pytest.approx(2e-3 + 0.032, rel=1e-12)
    # all_to_all sending 300 kB: 2/3 of it across at half the rate (2 ms + 32 ms)
    assert perfmodel.flat_alltoall_s(3e5, shared) == pytest.approx(2e-3 + 0.032, rel=1e-12)
    # a ring puts one rank of a host on each link between hosts: nothing shared
    assert perfmodel.flat_ring_allreduce_s(1e6, shared, 1e9) == perfmodel.flat_ring_allreduce_s(1e6, TWO_BY_TWO, 1e9)
    # one worker per host: the one link is its own
    single = perfmodel.Cluster(4, 1, INTER, INTER, shared_link=True)
    assert single.across == INTER
    assert perfmodel.flat_allgather_s(1e5, single) == perfmodel.flat_allgather_s(1e5, perfmodel.Cluster.flat(4, INTER))


def test_hierarchical_average_of_a_1mb_bucket():
    # H = 2 hosts x G = 2, a 1 MB fp32 bucket: a reduce-scatter inside the host ((G-1)/G of it sent at 300 GB/s,
    # as much summed at 1 GB/s); each local rank's half compressed 8x (62.5 kB) across the hosts, where its sra
    # sends one 31.25 kB chunk to the other host and gathers one back (1 ms + 2.5 ms each); then the
    # all_gather of the 500 kB halves inside the host
    inside_first = perfmodel.reduce_scatter_s(1e6, 2, INTRA, 1e9)
    assert inside_first == pytest.approx(0.5e6 / 3e11 + 0.5e6 / 1e9, rel=1e-12)
    across = perfmodel.alltoall_s(31250, 2, INTER) + perfmodel.allgather_s(31250, 2, INTER)
    assert across == pytest.approx(7e-3, rel=1e-12)
    inside_last = perfmodel.allgather_s(5e5, 2, INTRA)
    assert inside_first + across + inside_last == pytest.approx(7e-3 + 5e-4 + 1e6 / 3e11, rel=1e-12)
    # the flat fp32 ring of the same bucket, for scale: 6 ms + 120 ms + 0.75 ms
    assert perfmodel.flat_ring_allreduce_s(1e6, TWO_BY_TWO, 1e9) == pytest.approx(0.12675, rel=1e-12)
    # a reduce-scatter and an all_gather of its M/p-byte sums make the ring all_reduce
    assert perfmodel.reduce_scatter_s(1e6, 4, INTER, 1e9) + perfmodel.allgather_s(2.5e5, 4, INTER) == \
        pytest.approx(perfmodel.ring_allreduce_s(1e6, 4, INTER, 1e9), rel=1e-12)
    assert perfmodel.reduce_scatter_s(1e6, 1, INTER, 1e9) == perfmodel.reduce_scatter_s(0, 4, INTER) == 0.0


def test_one_worker_per_host_is_the_one_link_model_bit_for_bit():
    for p in (1, 2, 3, 7, 64):
        for link in (LINK, perfmodel.Link(12.5e6 / 3, 1.7e-5)):
            assert perfmodel.Cluster.flat(p, link) == perfmodel.Cluster(p, 1, link, link)
            for intra in (link, INTRA, perfmodel.Link(1.0, 9.0)):  # the intra link carries nothing
                flat = perfmodel.Cluster(p, 1, link, intra)
                for nbytes in (0.0, 1.0, 1e6 / 7, 3.3e7):
                    assert perfmodel.flat_ring_allreduce_s(nbytes, flat, 1.3e9) == \
                        perfmodel.ring_allreduce_s(nbytes, p, link, 1.3e9)
                    assert perfmodel.flat_allgather_s(nbytes, flat) == perfmodel.allgather_s(nbytes, p, link)
                    assert perfmodel.flat_alltoall_s(nbytes, flat) == perfmodel.alltoall_s(nbytes, p, link)


def test_timeline_overlap_and_serial():
    # two buckets: ready at 1 and 3 (s into backward, which takes 4), encode 0.5 each, comm 2, decode 0.25
    b = [perfmodel.Bucket(1.0, 0.5, 2.0, 0.25), perfmodel.Bucket(3.0, 0.5, 2.0, 0.25)]
    # overlap, encodes and the first decode contend: f1 = 1 + 0.5 + 2 = 3.5; the second bucket is ready after
    # 3 + 0.5 + 0.25 + 0.5: f2 = max(3.5, 4.25) + 2 = 6.25, then its decode; backward 4 + 1.25 = 5.25
    assert perfmodel.step_time(1.0, 4.0, 0.5, b, overlap=True) == pytest.approx(1.0 + max(5.25, 6.5) + 0.5)
    # a long first collective: the second bucket waits for it, and the first decode is hidden behind it
    slow = [perfmodel.Bucket(1.0, 0.5, 6.0, 0.25), perfmodel.Bucket(3.0, 0.5, 2.0, 0.25)]
    assert perfmodel.step_time(1.0, 4.0, 0.5, slow, overlap=True) == pytest.approx(1.0 + (7.5 + 2.0 + 0.25) + 0.5)
    assert perfmodel.step_time(1.0, 4.0, 0.5, b, overlap=False) == pytest.approx(1.0 + 4.0 + 2 * 2.75 + 0.5)
    # communication hidden behind backward: the step is compute plus the encodes
    quick = [perfmodel.Bucket(1.0, 0.0, 0.1, 0.0)]
    assert perfmodel.step_time(1.0, 4.0, 0.5, quick, overlap=True) == pytest.approx(5.5)


def test_speedup_bound_and_break_even():
    assert perfmodel.speedup_bound(3.0, 1.0) == pytest.approx(3.0)
    assert perfmodel.speedup_bound(0.5, 1.0) == 1.0
    assert perfmodel.break_even(lambda b: b < 5e8, 1e6, 1e12) == pytest.approx(5e8, rel=1e-9)
    assert perfmodel.break_even(lambda b: False, 1e6, 1e12) == 1e6
    assert perfmodel.break_even(lambda b: True, 1e6, 1e12) == 1e12


def test_compute_slowed_beside_communication():
    B = perfmodel.Bucket
    # one bucket ready 2 s into a 10 s backward, 4 s on the wire; at slowdown 1 the work runs at half speed
    # while it is: 2 s of work in those 4 s, the other 6 after: backward ends at 12 s
    assert perfmodel.step_time(0.0, 10.0, 0.0, [B(2.0, 0.0, 4.0, 0.0)], True, slowdown=1.0) == 12.0
    # two buckets; the first's decode (1 s of work) comes before the second's ready point, which moves to work
    # 5: wall 7 (2 of work in 2..6, 1 more at full speed); its 2 s on the wire to 9; backward's work, 11 with
    # the decode, reaches 6 at 9 (1 in 7..9) and 11 at 14
    buckets = [B(2.0, 0.0, 4.0, 1.0), B(4.0, 0.0, 2.0, 0.5)]
    assert perfmodel.step_time(1.0, 10.0, 0.5, buckets, True, slowdown=1.0) == 1.0 + 14.0 + 0.5
    # a slowdown of 0 is the plain timeline; without overlap there is nothing beside the work to slow it
    for slowdown, overlap in ((0.0, True), (0.5, False)):
        assert perfmodel.step_time(1.0, 10.0, 0.5, buckets, overlap, slowdown=slowdown) == \
            perfmodel.step_time(1.0, 10.0, 0.5, buckets, overlap)
    # more slowdown, never a shorter step; no communication, nothing slowed
    steps = [perfmodel.step_time(1.0, 10.0, 0.5, buckets, True, slowdown=s) for s in (0.0, 0.1, 0.5, 2.0)]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    quiet = [B(2.0, 0.5, 0.0, 0.25), B(4.0, 0.0, 0.0, 0.5)]
    assert perfmodel.step_time(1.0, 10.0, 0.5, quiet, True, slowdown=3.0) == \
        perfmodel.step_time(1.0, 10.0, 0.5, quiet, True)
