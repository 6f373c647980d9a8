"""The outer loop (compressors/sync/outer.py) on one worker: DiLoCo changes nothing but the schedule (its
steps are the inner optimizer's, then at each exchange an outer Nesterov SGD on global minus local), a
compressed exchange with error feedback conserves the sum, and evaluation sees the global parameters."""
from __future__ import annotations

import pytest
import torch

import compressors as C
from compressors.sync import MERGE_ALPHA, OuterSync


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)


def _inner_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    x, y = _batch(step)
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


def test_one_worker_diloco_is_its_inner_steps_then_an_outer_nesterov_step_on_global_minus_local():
    model, reference = _model(), _model()
    params = list(model.parameters())
    sync = OuterSync(params, C.Reducer("fp32"), inner_steps=3, outer_lr=0.7, outer_momentum=0.9)
    inner = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    ref_params = list(reference.parameters())
    ref_inner = torch.optim.SGD(ref_params, lr=0.1, momentum=0.9)
    ref_global = [p.detach().clone() for p in ref_params]
    ref_outer = torch.optim.SGD(ref_global, lr=0.7, momentum=0.9, nesterov=True)
    for step in range(1, 10):
        _inner_step(model, inner, step)
        sync.after_step()
        _inner_step(reference, ref_inner, step)
        if step % 3 == 0:
            with torch.no_grad():
                for g, p in zip(ref_global, ref_params):
                    g.grad = g - p
                ref_outer.step()
                for g, p in zip(ref_global, ref_params):
                    p.copy_(g)
        for p, r in zip(params, ref_params):
            assert torch.equal(p, r), step
    assert all(torch.equal(g, r) for g, r in zip(sync.global_params, ref_global))
    assert [bool(s.numel) for s in sync.history] == [False, False, True] * 3


def test_a_compressed_exchange_with_error_feedback_conserves_the_sum():
    """local SGD's outer SGD (lr 1, no momentum) moves the global parameters by minus each averaged outer
    gradient: over the exchanges, what moved them plus the residual left is the sum of the true ones."""
    model = _model()
    params = list(model.parameters())
    reducer = C.Reducer("topk", "allgather", min_compress_numel=0, pi=0.2)
    sync = OuterSync(params, reducer, inner_steps=2)
    inner = torch.optim.SGD(params, lr=0.1)
    start = [p.detach().double().clone() for p in params]
    true_sum = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    for step in range(1, 13):
        _inner_step(model, inner, step)
        if step % 2 == 0:
            for total, g, p in zip(true_sum, sync.global_params, params):
                total += (g - p).double()
        sync.after_step()
    for i, (s0, total) in enumerate(zip(start, true_sum)):
        moved = s0 - sync.global_params[i].double()
        assert torch.allclose(moved + reducer.ef.residuals[i].double(), total, atol=1e-6, rtol=0)
    assert any(float(r.abs().sum()) > 0 for r in reducer.ef.residuals.values())  # topk left something behind


def test_evaluation_sees_the_global_parameters_and_training_goes_on_from_its_own():
    model = _model()
    params = list(model.parameters())
    sync = OuterSync(params, C.Reducer("fp32"), inner_steps=4, outer_lr=0.7, outer_momentum=0.9)
    inner = torch.optim.SGD(params, lr=0.1)
    for step in range(1, 7):  # two steps past the exchange: local and global differ
        _inner_step(model, inner, step)
        sync.after_step()
    own = [p.detach().clone() for p in params]
    assert not all(torch.equal(p, g) for p, g in zip(own, sync.global_params))
    with sync.evaluated():
        assert all(torch.equal(p, g) for p, g in zip(params, sync.global_params))
    assert all(torch.equal(p, o) for p, o in zip(params, own))


def test_an_overlapped_exchange_merges_after_its_steps_with_the_papers_mixing():
    model, reference = _model(), _model()
    params = list(model.parameters())
    sync = OuterSync(params, C.Reducer("fp32"), inner_steps=4, outer_lr=1.0, overlap_steps=2)
    inner = torch.optim.SGD(params, lr=0.1)
    ref_params = list(reference.parameters())
    ref_inner = torch.optim.SGD(ref_params, lr=0.1)
    global_ = [p.detach().clone() for p in ref_params]
    sent = None
    for step in range(1, 9):
        _inner_step(model, inner, step)
        _inner_step(reference, ref_inner, step)
        sync.after_step()
        if step % 4 == 0:  # launched: the outer gradient of now
            sent = [g - p.detach() for g, p in zip(global_, ref_params)]
        if step % 4 == 2 and sent is not None:  # merged two steps on
            with torch.no_grad():
                for g, d, p in zip(global_, sent, ref_params):
                    g.sub_(d)
                    p.mul_(MERGE_ALPHA).add_(g, alpha=1 - MERGE_ALPHA)
        for p, r in zip(params, ref_params):
            assert torch.allclose(p, r, atol=1e-7, rtol=0), step
    sync.close()
    assert [bool(s.numel) for s in sync.history] == [False] * 5 + [True, False, False]


@pytest.mark.parametrize("inner_steps,fragments,overlap_steps,problem", [
    (0, 1, 0, "must be at least fragments"), (3, 4, 0, "must be at least fragments=4"),
    (6, 2, 3, r"overlap_steps=3 must be in \[0, floor\(inner_steps / fragments\) = 3\)")])
def test_a_schedule_that_cannot_run_is_refused(inner_steps, fragments, overlap_steps, problem):
    with pytest.raises(ValueError, match=problem):
        OuterSync(list(_model().parameters()), C.Reducer("fp32"), inner_steps=inner_steps, fragments=fragments,
                  overlap_steps=overlap_steps)
