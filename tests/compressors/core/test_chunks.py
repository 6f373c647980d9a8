"""Processing in pieces (compressors/core/chunks.py): any piece size gives the bytes of one piece.
"""
from __future__ import annotations

import pytest
import torch

import compressors as C


PIECEWISE_CASES = [
    ("dynamic8", {}, (3001,)), ("dynamic8", {"block": 100}, (37, 81)), ("linear8", {}, (5, 999)),
    ("linear8", {"block": 7}, (2049,)), ("qsgd", {"bits": 3, "bucket": 7}, (1001, 3)),
    ("qsgd", {"bits": 4, "bucket": 512}, (9, 1000)), ("qsgd", {"bits": 8, "norm": "l2", "bucket": 33}, (4097,)),
    ("qsgd", {"bits": 2, "bucket": 1}, (77, 13)), ("onebit", {}, (61, 7)), ("onebit", {}, (17, 3, 3)),
]


@pytest.mark.parametrize("name,params,shape", PIECEWISE_CASES)
@pytest.mark.parametrize("piece", [1, 8, 64, 1000])
def test_piecewise_processing_gives_the_same_bytes_as_one_piece(monkeypatch, name, params, shape, piece):
    from compressors.core import chunks

    x = torch.randn(shape, generator=torch.Generator().manual_seed(5)) * 3
    x.view(-1)[::97] = 0.0
    c = C.get(name, **params)
    monkeypatch.setattr(chunks, "CHUNK_ELEMS", 1 << 30)
    whole = c.encode(x, step=3, rank=1, stream=2)
    whole_decoded = c.decode(whole)
    monkeypatch.setattr(chunks, "CHUNK_ELEMS", piece)
    pieces = c.encode(x, step=3, rank=1, stream=2)
    assert torch.equal(pieces, whole)
    assert torch.equal(c.decode(whole), whole_decoded)
