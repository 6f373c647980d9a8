"""The gpt model of workloads/ (gpt.py, its entry in models.py): shapes, causality, the tied head,
parameter counts against a hand count (GPT-2 small on the meta device), initialisation, errors, and a short
deterministic training run on python_source bytes that must learn (CPU, about 5 s)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import workloads
from workloads import build_dataset, build_model


def gpt_count(vocab: int, block: int, layers: int, width: int) -> int:
    """Hand count: per block two LayerNorms (4C), attention in 3C^2 + 3C and out C^2 + C, MLP 4C^2 + 4C and
    4C^2 + C; embeddings (vocab + block) C; final LayerNorm 2C; the head shares the token embedding."""
    block_params = 4 * width + (3 * width**2 + 3 * width) + (width**2 + width) + (4 * width**2 + 4 * width) \
        + (4 * width**2 + width)
    return layers * block_params + (vocab + block) * width + 2 * width


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_parameter_counts():
    assert gpt_count(50257, 1024, 12, 768) == 124_439_808  # GPT-2 small, as published
    with torch.device("meta"):  # counts without allocating the weights
        gpt2 = build_model("gpt", (1024,), 50257, n_layer=12, n_head=12, n_embd=768)
        assert count(gpt2) == 124_439_808
        assert count(build_model("gpt", (64,), 256)) == gpt_count(256, 64, 2, 64) == 120_576
        wide = build_model("gpt", (32,), 1000, n_layer=3, n_head=4, n_embd=48, block_size=100, dropout=0.1)
        assert count(wide) == gpt_count(1000, 100, 3, 48)


def test_forward_shape_and_shorter_sequences():
    torch.manual_seed(0)
    model = build_model("gpt", (16,), 50, block_size=24).eval()
    assert model.transformer.wpe.weight.shape == (24, 64)
    with torch.no_grad():
        for steps in (16, 24, 1):
            logits = model(torch.randint(0, 50, (3, steps)))
            assert logits.shape == (3, steps, 50) and logits.dtype == torch.float32
            assert torch.isfinite(logits).all()
        with pytest.raises(ValueError, match="25 tokens exceeds block_size 24"):
            model(torch.randint(0, 50, (1, 25)))


def test_causal():
    torch.manual_seed(0)
    model = build_model("gpt", (32,), 97, n_layer=2, n_head=4, n_embd=32).eval()
    tokens = torch.randint(0, 97, (2, 32))
    with torch.no_grad():
        before = model(tokens)
        for t in (0, 1, 17, 31):
            changed = tokens.clone()
            changed[:, t] = (changed[:, t] + 1) % 97
            after = model(changed)
            # No position sees a later token: everything before t is bit for bit the same.
            assert torch.equal(after[:, :t], before[:, :t])
            assert not torch.allclose(after[:, t], before[:, t])


def test_head_tied_to_token_embedding():
    torch.manual_seed(0)
    model = build_model("gpt", (8,), 30)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.bias is None
    F.cross_entropy(model(torch.randint(0, 30, (2, 8))).flatten(0, 1), torch.randint(0, 30, (16,))).backward()
    with torch.no_grad():
        model.lm_head.weight -= model.lm_head.weight.grad
    assert torch.equal(model.transformer.wte.weight, model.lm_head.weight)


def test_initialisation_as_nanogpt():
    torch.manual_seed(0)
    layers = 8
    model = build_model("gpt", (16,), 500, n_layer=layers, n_head=4, n_embd=256)
    residual_std = 0.02 / math.sqrt(2 * layers)
    for name, param in model.named_parameters():
        if name.endswith(".bias"):
            assert not param.any(), name  # LayerNorm and Linear biases start at zero
        elif ".ln_" in name or name.startswith("transformer.ln_f"):
            assert torch.equal(param, torch.ones_like(param)), name
        else:
            expected = residual_std if name.endswith("c_proj.weight") else 0.02
            assert param.std().item() == pytest.approx(expected, rel=0.05), name
            assert abs(param.mean().item()) < expected / 10, name


def test_dropout_only_in_training():
    torch.manual_seed(0)
    model = build_model("gpt", (8,), 20, dropout=0.5)
    tokens = torch.randint(0, 20, (2, 8))
    assert not torch.equal(model(tokens), model(tokens))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(tokens), model(tokens))


@pytest.mark.parametrize(
    "shape,options,message",
    [
        ((1, 28, 28), {}, r"model 'gpt' needs a token input_shape \[sequence length\], got \[1, 28, 28\]"),
        ((8, 8), {}, r"token input_shape \[sequence length\]"),
        ((64,), {"n_head": 3}, "n_embd 64 must be divisible by n_head 3"),
        ((64,), {"n_embd": 30, "n_head": 4}, "n_embd 30 must be divisible by n_head 4"),
        ((64,), {"block_size": 32}, "block_size 32 is shorter than the sequence length 64"),
        ((64,), {"dropout": 1.0}, r"dropout must lie in \[0, 1\), got 1.0"),
        ((64,), {"dropout": -0.1}, "dropout"),
        ((64,), {"n_layer": 0}, "n_layer"),
        ((64,), {"width": 8}, "valid options: n_layer, n_head, n_embd, block_size, dropout"),
    ],
)
def test_build_errors(shape, options, message):
    with pytest.raises(ValueError, match=message):
        build_model("gpt", shape, 256, **options)


def test_image_models_refuse_token_shapes():
    # A sequence-length shape reaches the convnets only by mistake; each says what it needs.
    for name in workloads.MODEL_NAMES:
        if name in ("gpt", "mlp"):
            continue
        with pytest.raises(ValueError, match=rf"model '{name}' needs an image input_shape"):
            with torch.device("meta"):
                build_model(name, (64,), 256)


@pytest.mark.slow  # trains for seconds
def test_learns_python_source():
    # 60 Adam steps on random training windows of bytes. The loss starts near ln 256 (uniform over bytes)
    # and must end below the byte distribution's own entropy (3.25 nats for CPython 3.11's library), which no
    # predictor blind to context can beat: the model uses the preceding bytes. Measured: 5.42 -> 3.05.
    data = build_dataset("python_source", seq_len=64)
    counts = np.bincount(data.train.tokens, minlength=256)
    share = counts[counts > 0] / counts.sum()
    unigram_entropy = float(-(share * np.log(share)).sum())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same sums in the same order on every run
    try:
        torch.manual_seed(0)
        model = build_model("gpt", data.input_shape, data.num_classes, n_layer=2, n_head=2, n_embd=64)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        batches = torch.Generator().manual_seed(0)
        losses = []
        for _ in range(60):
            samples = [data.train[i] for i in torch.randint(len(data.train), (16,), generator=batches).tolist()]
            x, y = (torch.stack(part) for part in zip(*samples))
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    finally:
        torch.set_num_threads(threads)
    assert losses[0] == pytest.approx(math.log(256), abs=0.3)
    final = sum(losses[-10:]) / 10
    assert final < min(3.5, unigram_entropy - 0.05), (losses[0], final, unigram_entropy)
