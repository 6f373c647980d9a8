"""A bucket's tensors in one call (``Compressor.encode_many``, ``decode_many``), for every registered codec with
each of its examples and each implementation it has on the CPU: the payloads byte for byte those of one call
per tensor, back to back, and the decodes (and decode-adds) those of one call per payload; bodies that start off
8 bytes go through a scratch; a buffer the payloads do not fill is refused."""
from __future__ import annotations

import pytest
import torch

import compressors as C
from compressors.core import registry, wire

from tests.helpers import cfg_id, configs, randn

CONFIGS = [(name, p, impl) for name, p in configs() for impl in registry.impls(name) if impl in ("reference", "numba")]
# a bucket's kinds: a conv weight, a matrix with columns of 8 rows, odd sizes whose bodies end off 8 bytes, a
# 0-D and an empty one, a 1-D bias
SHAPES = [(16, 3, 3, 3), (40, 33), (7,), (3, 5), (), (0, 4), (1000,), (129, 2)]


def bucket():
    return [randn(*shape, seed=i) if shape else torch.tensor(0.75) for i, shape in enumerate(SHAPES)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{cfg_id(c[:2])}-{c[2]}")
def test_many_tensors_in_one_call_are_the_calls_of_each(cfg):
    name, params, impl = cfg
    c = C.get(name, impl=impl, **params)
    xs = bucket()
    streams = [3 * i + 1 for i in range(len(xs))]
    absmaxes = [float(x.abs().max()) * 2 if x.numel() else 0.0 for x in xs] if c.scales_by_tensor else None
    one_by_one = [c.encode(x, step=5, rank=2, stream=s, **({} if absmaxes is None else {"absmax": a}))
                  for x, s, a in zip(xs, streams, absmaxes or [None] * len(xs))]
    many = c.encode_many(xs, step=5, rank=2, streams=streams, absmaxes=absmaxes)
    assert torch.equal(many, torch.cat(one_by_one))
    outs = [torch.full((x.numel(),), 0.5) for x in xs]
    c.decode_many(many, outs)
    for out, payload, x in zip(outs, one_by_one, xs):
        assert torch.equal(out, c.decode(payload).reshape(-1))
    added = [torch.full((x.numel(),), -0.0) for x in xs]
    c.decode_many(many, added, add=True)
    for out, payload, x in zip(added, one_by_one, xs):
        alone = torch.full((x.numel(),), -0.0)
        c.decode(payload, out=alone, add=True)
        assert torch.equal(out, alone)


def test_a_buffer_the_payloads_do_not_fill_is_refused():
    c = C.get("qsgd", impl="numba")
    xs = bucket()[:3]
    many = c.encode_many(xs, streams=[0, 1, 2])
    outs = [torch.empty(x.numel()) for x in xs]
    with pytest.raises(wire.PayloadError, match="the payloads take"):
        c.decode_many(many, outs[:2])
    with pytest.raises(wire.PayloadError, match="payload truncated"):
        c.decode_many(many[:-1], outs)
    with pytest.raises(ValueError, match="a stream .* per tensor"):
        c.encode_many(xs, streams=[0, 1])
