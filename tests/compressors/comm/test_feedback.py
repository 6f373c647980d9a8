"""Error feedback (compressors/comm/feedback.py): what is sent plus the residual is what came in, for
the methods that need it, and its state survives a round trip.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import compressors as C
from tests.helpers import SPARSE, randn


def run_with_feedback(codec, shape: tuple[int, int], steps: int) -> tuple[torch.Tensor, torch.Tensor, C.ErrorFeedback]:
    """``steps`` gradients through ``codec`` with error feedback: the float64 sums of what came in and of
    what was decoded, and the feedback; each gradient is checked to be left alone."""
    ef = C.ErrorFeedback()
    total_in = torch.zeros(shape, dtype=torch.float64)
    total_out = torch.zeros(shape, dtype=torch.float64)
    for t in range(steps):
        g = randn(*shape, seed=100 + t)
        g0 = g.clone()
        v = ef.compensate("w", g)
        assert torch.equal(g, g0)  # the gradient is left alone
        d = codec.decode(codec.encode(v, step=t))
        ef.update("w", v, d)
        total_in += g.double()
        total_out += d.double()
    return total_in, total_out, ef


@pytest.mark.parametrize("name,p", [("onebit", {}), ("adaptive", {"pi": 0.05}), ("topk", {"pi": 0.05}),
                                    ("qsgd", {"bits": 2, "bucket": 16})], ids=lambda v: str(v))
def test_error_feedback_conserves_the_sum(name, p):
    total_in, total_out, ef = run_with_feedback(C.get(name, **p), (6, 20), 25)
    assert torch.allclose(total_out + ef.residuals["w"].double(), total_in, atol=1e-4, rtol=0)
    if name in SPARSE + ("onebit",):  # the residual holds what was not sent yet
        assert float(ef.residuals["w"].abs().sum()) > 0


@pytest.mark.parametrize("name", ["efsignsgd", "scaledsign", "randomk"])
def test_error_feedback_with_memory_keeps_the_residual_bounded(name, impl):
    c = C.get(name, impl=impl, **({"pi": 0.1} if name == "randomk" else {}))
    total_in, total_out, ef = run_with_feedback(c, (6, 20), 25)
    assert torch.allclose(total_out + ef.residuals["w"].double(), total_in, atol=1e-4, rtol=0)
    # with memory the running sum tracks the true one: the residual stays bounded
    assert float(ef.residuals["w"].abs().max()) < 25


def test_sampled_error_feedback_conserves_the_sum():
    c = C.get("adaptive", grouping="column", pi=0.02, threshold="sampled")
    total_in, total_out, ef = run_with_feedback(c, (40, 60), 20)
    assert torch.allclose(total_out + ef.residuals["w"].double(), total_in, atol=1e-4, rtol=0)
    assert np.isfinite(ef.residuals["w"].numpy()).all()


def test_error_feedback_state_dict_roundtrip():
    ef = C.ErrorFeedback()
    c = C.get("topk", pi=0.1)
    for key in ("a", ("b", 1)):
        for t in range(3):
            v = ef.compensate(key, randn(4, 5, seed=t))
            ef.update(key, v, c.decode(c.encode(v)))
    state = ef.state_dict()
    ef2 = C.ErrorFeedback()
    ef2.load_state_dict(state)
    g = randn(4, 5, seed=9)
    for key in ("a", ("b", 1)):
        assert torch.equal(ef2.compensate(key, g), ef.compensate(key, g))
    # the state is a copy
    before = state["residuals"]["a"].clone()
    ef.residuals["a"] += 1
    assert torch.equal(state["residuals"]["a"], before)
    # a residual of another shape is refused
    with pytest.raises(ValueError):
        ef.compensate("a", torch.zeros(3))
    # first use: no residual
    assert torch.equal(C.ErrorFeedback().compensate("x", g), g)
