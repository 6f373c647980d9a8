"""1-bit Adam (compressors/optim/onebit_adam.py): its warm-up is Adam with an fp32 all-reduce, after it the
variance stays as it was, error feedback keeps what the compressed momentum lost, and its state resumes the
next step bit for bit."""
from __future__ import annotations

import io

import pytest
import torch
import torch.distributed as dist

import compressors as C
from compressors.core import registry
from compressors.optim import ONEBIT_ADAM, OnebitAdam, warmup_steps_of
from tests.distributed import guard, ok, run_ranks


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(40, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))


def _batch(step: int, rank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + 10 * step + rank)
    return torch.randn(16, 40, generator=g), torch.randint(0, 3, (16,), generator=g)


def _backward(model: torch.nn.Module, step: int, rank: int = 0) -> None:
    x, y = _batch(step, rank)
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()


def _onebit(model: torch.nn.Module, warmup_steps: int, codec: str = "scaledsign", **kw) -> OnebitAdam:
    # min_compress_numel 0: every tensor goes through the codec, the biases too
    return OnebitAdam(model.parameters(), C.Reducer(codec, min_compress_numel=0), C.Reducer("fp32"),
                      warmup_steps=warmup_steps, lr=0.01, **kw)


def _warmup_is_adam(rank: int, world: int) -> bool:
    model, reference = _model(), _model()
    onebit = _onebit(model, warmup_steps=100)
    adam = torch.optim.Adam(reference.parameters(), lr=0.01)
    for step in range(6):
        _backward(model, step, rank)
        onebit.step()
        _backward(reference, step, rank)
        for p in reference.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        adam.step()
        if not all(torch.equal(p, r) for p, r in zip(model.parameters(), reference.parameters())):
            return False
    return not onebit.frozen and len(onebit.history) == 6


def _compressed_steps_agree(rank: int, world: int) -> bool:
    """After the warm-up, on different batches, every rank holds the same parameters and momenta."""
    model = _model()
    onebit = _onebit(model, warmup_steps=2)
    before = [p.detach().clone() for p in model.parameters()]
    for step in range(6):
        _backward(model, step, rank)
        onebit.step()
    mine = torch.cat([t.reshape(-1) for p in model.parameters() for t in (p.detach(), onebit.adam.state[p]["exp_avg"])])
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    moved = all(not torch.equal(p, b) for p, b in zip(model.parameters(), before))
    return onebit.frozen and moved and all(torch.equal(every[0], other) for other in every[1:])


def _two_ranks(rank: int, world: int) -> dict:
    return {"adam": guard(_warmup_is_adam, rank, world), "agree": guard(_compressed_steps_agree, rank, world)}


@pytest.mark.slow
def test_on_two_workers_the_warmup_is_adam_with_an_fp32_allreduce_and_compressed_steps_agree():
    results = run_ranks(2, _two_ranks)
    assert all(ok(r["adam"], "1-bit Adam's warm-up") for r in results)
    assert all(ok(r["agree"], "1-bit Adam's compressed steps") for r in results)


def test_a_warmup_covering_every_step_is_adam_on_one_worker():
    model, reference = _model(), _model()
    onebit, adam = _onebit(model, warmup_steps=100), torch.optim.Adam(reference.parameters(), lr=0.01)
    for step in range(6):
        for m, o in ((model, onebit), (reference, adam)):
            _backward(m, step)
            o.step()
        assert all(torch.equal(p, r) for p, r in zip(model.parameters(), reference.parameters())), step


@pytest.mark.parametrize("decoupled", [False, True])
def test_after_the_warmup_the_variance_stays_and_steps_follow_the_averaged_momentum(decoupled):
    """fp32 as the momentum's codec: each step after the warm-up is Adam's with the variance (and its bias
    correction) of the warm-up's last step."""
    model = _model()
    onebit = _onebit(model, warmup_steps=3, codec="fp32", weight_decay=0.1, decoupled=decoupled)
    for step in range(3):
        _backward(model, step)
        onebit.step()
    assert onebit.frozen
    frozen = [onebit.adam.state[p]["exp_avg_sq"].clone() for p in model.parameters()]
    for step in range(3, 8):
        before = [p.detach().clone() for p in model.parameters()]
        momenta = [onebit.adam.state[p]["exp_avg"].clone() for p in model.parameters()]
        _backward(model, step)
        onebit.step()
        for p, b, m, v in zip(model.parameters(), before, momenta, frozen):
            assert torch.equal(onebit.adam.state[p]["exp_avg_sq"], v)
            grad = p.grad if decoupled else p.grad + 0.1 * b
            m = m.lerp(grad, 0.1)
            decayed = b * (1 - 0.01 * 0.1) if decoupled else b
            denom = (v.sqrt() / (1 - 0.999 ** 3) ** 0.5) + 1e-8
            expected = decayed - 0.01 / (1 - 0.9 ** (step + 1)) * m / denom
            assert torch.allclose(onebit.adam.state[p]["exp_avg"], m, rtol=0, atol=1e-7)
            assert torch.allclose(p, expected, rtol=1e-6, atol=1e-7), step
    assert len(onebit.history) == 8


def test_with_one_worker_the_sent_momentum_plus_the_residuals_is_the_true_momentum():
    model = _model()
    onebit = _onebit(model, warmup_steps=2)
    for step in range(2):
        _backward(model, step)
        onebit.step()
    reducer, params = onebit.reducer, list(model.parameters())
    assert reducer.ef is not None and reducer.server_ef is not None  # scaledsign over sra: both sides

    def residuals() -> list[torch.Tensor]:
        out = []
        for i, p in enumerate(params):
            r = torch.zeros_like(p)
            for ef in (reducer.ef, reducer.server_ef):
                r += sum((t.reshape(p.shape) for k, t in ef.residuals.items() if k == i or
                          (isinstance(k, tuple) and k[0] == i)), torch.zeros_like(p))
            out.append(r)
        return out

    for step in range(2, 7):
        kept = residuals()
        _backward(model, step)
        true = [onebit.adam.state[p]["exp_avg"].lerp(p.grad, 0.1) for p in params]
        onebit.step()
        sent = [onebit.adam.state[p]["exp_avg"] for p in params]
        left = residuals()
        for s, r, t, k in zip(sent, left, true, kept):
            assert not torch.equal(s, t)  # the codec changed it
            assert torch.allclose(s + r, t + k, rtol=0, atol=1e-6), step
        if step == 2:  # the first compressed step: no residual before it
            assert all(not k.any() for k in kept)


def test_its_state_resumes_the_next_steps_bit_for_bit():
    model = _model()
    onebit = _onebit(model, warmup_steps=3)
    for step in range(5):
        _backward(model, step)
        onebit.step()
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": onebit.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    resumed_model = _model()
    resumed_model.load_state_dict(saved["model"])
    resumed = _onebit(resumed_model, warmup_steps=3)
    resumed.load_state_dict(saved["optimizer"])
    assert resumed.steps == 5 and resumed.frozen
    for step in range(5, 9):
        for m, o in ((model, onebit), (resumed_model, resumed)):
            _backward(m, step)
            o.step()
        assert all(torch.equal(p, r) for p, r in zip(model.parameters(), resumed_model.parameters())), step
    with pytest.raises(ValueError, match="warmup_steps=3 cannot be loaded into warmup_steps=4"):
        _onebit(_model(), warmup_steps=4).load_state_dict(saved["optimizer"])


def test_a_coordinate_without_gradient_in_the_warmup_stays_where_it_is():
    """A key's bias in attention gets no gradient (softmax cancels it): the sign codec would send its zero
    momentum as +-scale (the scale of the tensor's other coordinates), a step of scale / eps."""
    model = _model()
    half = torch.nn.Parameter(torch.zeros(6))  # its last three coordinates never get a gradient
    onebit = OnebitAdam([*model.parameters(), half], C.Reducer("scaledsign", min_compress_numel=0),
                        C.Reducer("fp32"), warmup_steps=2, lr=0.01)
    for step in range(6):
        _backward(model, step)
        half.grad = torch.tensor([0.5, -0.25, 1.0, 0.0, 0.0, 0.0]) * (step + 1)
        onebit.step()
    assert torch.equal(half[3:], torch.zeros(3)) and bool(half[:3].ne(0).all())
    assert not onebit.adam.state[half]["exp_avg"][3:].any()


def test_a_parameter_without_a_gradient_on_this_rank_is_averaged_as_zeros():
    """The ranks must average the same tensors, whichever parameters their batches reached."""
    model = _model()
    onebit = _onebit(model, warmup_steps=2)
    _backward(model, 0)
    model[2].bias.grad = None
    onebit.step()
    assert torch.equal(model[2].bias.grad, torch.zeros(3)) and onebit.history[0].numel == sum(
        p.numel() for p in model.parameters())


def test_one_parameter_group_only():
    model = _model()
    groups = [{"params": model[0].parameters()}, {"params": model[2].parameters(), "weight_decay": 0.0}]
    with pytest.raises(ValueError, match="OnebitAdam takes one parameter group, got 2"):
        OnebitAdam(groups, C.Reducer("scaledsign"), C.Reducer("fp32"), warmup_steps=2)


def test_warmup_steps_default_to_fifteen_percent_of_the_run_rounded_up():
    assert [warmup_steps_of({"warmup_steps": None}, n) for n in (240, 100, 7, 1)] == [36, 15, 2, 1]
    assert warmup_steps_of({"warmup_steps": 9}, 240) == 9
    with pytest.raises(ValueError, match="warmup_steps=0 must be >= 1"):
        _onebit(_model(), warmup_steps=0)


def test_it_is_a_method_with_parameters_and_no_payload_codec():
    assert ONEBIT_ADAM in C.names() and registry.optimizer_method(ONEBIT_ADAM)
    assert not registry.hook_only(ONEBIT_ADAM) and registry.algorithm_choices(ONEBIT_ADAM) == ()
    assert C.check_params(ONEBIT_ADAM) == {"warmup_steps": None, "codec": "scaledsign", "seed": 0}
    with pytest.raises(ValueError, match="codec='dgc' keeps sgd's momentum"):
        C.check_params(ONEBIT_ADAM, codec="dgc")
    with pytest.raises(ValueError, match="codec='powersgd' must be one of the payload codecs"):
        C.check_params(ONEBIT_ADAM, codec="powersgd")
    with pytest.raises(ValueError, match="averages inside its optimizer's step"):
        C.Reducer(ONEBIT_ADAM)
