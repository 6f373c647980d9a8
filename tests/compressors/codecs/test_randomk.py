"""Random-k with memory (compressors/codecs/randomk.py) against Stich et al.: k values unscaled, the
counter hash's choice, uniform over the steps.
"""
from __future__ import annotations

import math

import numpy as np
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


def test_randomk_choice_is_the_hash_order_and_changes_every_step(impl):
    c = C.get("randomk", pi=0.1, impl=impl)
    x = randn(500, seed=7).abs() + 1.0
    key = rng.stream_key(0, 9, 2, 4)
    u = rng.uniform(key, 500, "cpu").numpy()
    order = np.lexsort((np.arange(500), -u))  # largest draws, ties by lowest index
    chosen = (roundtrip(c, x, step=9, rank=2, stream=4) != 0).nonzero().view(-1).numpy()
    assert chosen.tolist() == np.sort(order[:50]).tolist()
    other = (roundtrip(c, x, step=10, rank=2, stream=4) != 0).nonzero().view(-1).numpy()
    assert chosen.tolist() != other.tolist()


def test_randomk_choice_is_uniform():
    n, k, T = 64, 8, 1000
    c = C.get("randomk", pi=k / n)
    counts = torch.zeros(n)
    for t in range(T):
        counts += roundtrip(c, torch.ones(n), step=t) != 0
    p = k / n  # each entry's chance; binomial std of its count
    z = (counts - T * p).abs() / math.sqrt(T * p * (1 - p))
    assert float(z.max()) < 4.5
