"""Random-k with memory (compressors/codecs/randomk.py) against Stich et al.: k values unscaled, the
keyed permutation's choice, uniform over the steps.
"""
from __future__ import annotations

import math

import pytest
import torch

import compressors as C
from compressors.core import rng
from tests.helpers import randn, roundtrip


def test_randomk_sends_k_values_unscaled(impl):
    c = C.get("randomk", pi=0.05, impl=impl)
    x = randn(40, 50, seed=6).abs() + 1.0  # no zero entry: the sent ones are the nonzeros
    out = roundtrip(c, x, step=2, rank=1, stream=3)
    sent = out != 0
    assert int(sent.sum()) == 100
    assert torch.equal(out[sent], x[sent])  # Stich et al.: unscaled, with memory


def _fmix32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & 0xFFFFFFFF
    return x ^ (x >> 16)


def _drawn(key: int, n: int, k: int) -> list[int]:
    """The documented choice, one index at a time in plain integers: a 4-round Feistel network on
    2h bits (4**h >= n), round r keyed by fmix32(key + (r + 1) * GOLDEN), walked until below n."""
    half = 1
    while 4 ** half < n:
        half += 1
    mask = (1 << half) - 1
    keys = [_fmix32((key + (r + 1) * 0x9E3779B1) & 0xFFFFFFFF) for r in range(4)]
    out = []
    for j in range(k):
        x = j
        while True:
            left, right = x >> half, x & mask
            for rk in keys:
                left, right = right, left ^ (_fmix32(((right * 0x9E3779B1) & 0xFFFFFFFF) ^ rk) & mask)
            x = (left << half) | right
            if x < n:
                break
        out.append(x)
    return out


def test_randomk_choice_is_the_keyed_permutation_and_changes_every_step(impl):
    c = C.get("randomk", pi=0.1, impl=impl)
    x = torch.arange(1, 501, dtype=torch.float32)  # entry i holds i + 1: the values name their indices
    key = rng.stream_key(0, 9, 2, 4)
    payload = c.encode(x, step=9, rank=2, stream=4)
    values = payload[-4 * 50:].view(torch.float32)
    assert (values - 1).long().tolist() == _drawn(key, 500, 50)  # in draw order
    assert sorted(_drawn(key, 500, 500)) == list(range(500))  # a permutation: distinct without a check
    chosen = (roundtrip(c, x, step=9, rank=2, stream=4) != 0).nonzero().view(-1).tolist()
    assert chosen == sorted(_drawn(key, 500, 50))
    other = (roundtrip(c, x, step=10, rank=2, stream=4) != 0).nonzero().view(-1).tolist()
    assert chosen != other


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 17, 64, 65, 1000, 4097])
def test_randomk_draws_are_a_permutation_of_every_size(n):
    for key in (0, 1, 0xFFFFFFFF):
        assert sorted(rng.permuted(key, n, n).tolist()) == list(range(n))
    assert rng.permuted(7, n, 0).size == 0


def test_randomk_decode_adds_out_plus_value_and_zero_elsewhere(impl):
    # -0.0 where a value lands keeps out + value's sign rules; -0.0 elsewhere becomes +0.0 (a dense add)
    c = C.get("randomk", pi=0.25, impl=impl)
    x = torch.full((64,), -0.0)
    payload = c.encode(x, step=3)
    out = torch.full((64,), -0.0)
    c.decode(payload, out=out, add=True)
    chosen = set(_drawn(rng.stream_key(0, 3, 0, 0), 64, 16))
    signs = torch.signbit(out).tolist()
    assert [i for i in range(64) if signs[i]] == sorted(chosen)  # -0.0 + -0.0 = -0.0; -0.0 + 0.0 = +0.0


def test_randomk_choice_is_uniform():
    n, k, T = 64, 8, 1000
    c = C.get("randomk", pi=k / n)
    counts = torch.zeros(n)
    for t in range(T):
        counts += roundtrip(c, torch.ones(n), step=t) != 0
    p = k / n  # each entry's chance; binomial std of its count
    z = (counts - T * p).abs() / math.sqrt(T * p * (1 - p))
    assert float(z.max()) < 4.5


def test_randomk_pairs_are_chosen_together_as_often_as_a_uniform_subset():
    # a uniform k-subset holds a given pair with chance k(k-1) / (n(n-1)); binomial z over all pairs
    n, k, T = 16, 4, 3000
    together = torch.zeros(n, n)
    for t in range(T):
        sent = torch.zeros(n)
        sent[torch.from_numpy(rng.permuted(rng.stream_key(0, t, 0, 0), n, k))] = 1
        together += sent[:, None] * sent[None, :]
    p = k * (k - 1) / (n * (n - 1))
    pairs = together[torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)]
    z = (pairs - T * p).abs() / math.sqrt(T * p * (1 - p))
    assert float(z.max()) < 4.5


def test_randomk_decode_add_quiets_a_signalling_nan_elsewhere_as_the_dense_add(impl):
    c = C.get("randomk", pi=0.25, impl=impl)
    payload = c.encode(torch.ones(64), step=3)
    out = torch.zeros(64)
    out.view(torch.int32)[:] = 0x7F800001  # a signalling NaN everywhere
    c.decode(payload, out=out, add=True)
    assert set(out.view(torch.int32).tolist()) == {0x7FC00001}  # out + value and out + 0.0 alike: quiet
