"""Top-k (compressors/codecs/topk.py): exactly the k largest, ties to the lowest index (adaptive's
selection too), and k = ceil(pi * n).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import compressors as C
from tests.helpers import k_sent, randn, roundtrip, top_indices


@pytest.mark.parametrize("shape,pi", [((1000,), 0.01), ((7, 13), 0.2), ((4, 3, 3, 3), 0.5), ((5,), 1.0)], ids=str)
def test_topk_keeps_exactly_the_k_largest(shape, pi):
    x = randn(*shape, seed=6)
    out = roundtrip(C.get("topk", pi=pi), x)
    flat = x.reshape(-1).numpy()
    idx = top_indices(flat, k_sent(pi, flat.size))
    expect = np.zeros_like(flat)
    expect[idx] = flat[idx]
    assert np.array_equal(out.reshape(-1).numpy(), expect)


@pytest.mark.parametrize("name,p", [("topk", {}), ("adaptive", {"grouping": "row"})], ids=str)
def test_sparse_ties_go_to_the_lowest_index(name, p):
    x = torch.tensor([0.5, -1.0, 1.0, 2.0, -1.0, 1.0, 0.25, 1.0]).view(2, 4)
    c = C.get(name, pi=3 / 8, **p)  # k = 3: 2.0, then the first two of the five tied 1.0s
    out = roundtrip(c, x).view(-1)
    assert (out != 0).nonzero().view(-1).tolist() == [1, 2, 3]
    if name == "topk":
        assert out.tolist() == [0, -1.0, 1.0, 2.0, 0, 0, 0, 0]
    else:
        assert out.tolist() == [0, -1.0, 1.5, 1.5, 0, 0, 0, 0]


def test_k_is_ceil_pi_n():
    for pi, n, k in [(0.1, 1000, 100), (0.01, 100, 1), (0.01, 101, 2), (0.001, 10, 1), (0.3, 10, 3),
                     (0.7, 10, 7), (1.0, 5, 5), (0.5, 1, 1), (1e-9, 10**6, 1)]:
        assert k_sent(pi, n) == k
        assert C.get("topk", pi=pi).payload_nbytes((n,)) == 48 + 8 * k
