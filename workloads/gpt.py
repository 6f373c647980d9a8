"""A decoder-only transformer language model in the layout of GPT-2 and Karpathy's nanoGPT.

Token and learned position embeddings, ``n_layer`` pre-LayerNorm blocks of
causal multi-head self-attention (``scaled_dot_product_attention`` with
``is_causal=True``, so it uses the fused kernels where torch has them) and a
4x-wide GELU MLP, a final LayerNorm and a linear head whose weight is the
token embedding's (tied, as in GPT-2). Every Linear and LayerNorm has a bias.
Weights start as nanoGPT's: normal(0, 0.02), biases zero, and the two
projections back into the residual stream in each block normal(0, 0.02 /
sqrt(2 * n_layer)) so the residual stream's variance does not grow with depth.

Input: int64 token ids [B, T] with T at most ``block_size`` (the length of the
position embedding); output: logits [B, T, vocab], at every position those of
the next token. ``input_shape`` is ``(T,)``, the training sequence length, and
``num_classes`` the vocabulary size.

Parameter count, tied head: 12 n_layer n_embd^2 + 13 n_layer n_embd
+ (vocab + block_size + 2) n_embd:
- defaults (2 layers, 2 heads, width 64), bytes (vocab 256), sequence 64: 120,576
- GPT-2 small (12 layers, 12 heads, width 768, block_size 1024, vocab 50,257): 124,439,808
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

INIT_STD = 0.02


class _CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)  # queries, keys and values of all heads at once
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, steps, width = x.shape
        q, k, v = self.c_attn(x).split(width, dim=2)
        # [B, T, C] -> [B, heads, T, C / heads]: attention runs per head.
        q, k, v = (t.view(batch, steps, self.n_head, width // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view(batch, steps, width)
        return self.resid_dropout(self.c_proj(y))


class _MLP(nn.Module):
    def __init__(self, n_embd: int, dropout: float) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class _Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = _CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = _MLP(n_embd, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token ids [B, T] -> next-token logits [B, T, vocab_size]; submodule names as nanoGPT's."""

    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int,
                 dropout: float) -> None:
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList(_Block(n_embd, n_head, dropout) for _ in range(n_layer)),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(_init_weights)
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=INIT_STD / math.sqrt(2 * n_layer))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        steps = idx.shape[1]
        if steps > self.block_size:
            raise ValueError(f"gpt: a sequence of {steps} tokens exceeds block_size {self.block_size}")
        positions = torch.arange(steps, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(positions))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def _init_weights(module: nn.Module) -> None:
    # LayerNorms keep torch's weight 1, bias 0.
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)


def build_gpt(
    input_shape: tuple[int, ...],
    num_classes: int,
    *,
    n_layer: int = 2,
    n_head: int = 2,
    n_embd: int = 64,
    block_size: int | None = None,
    dropout: float = 0.0,
) -> nn.Module:
    """A GPT over a vocabulary of ``num_classes`` tokens for sequences of ``input_shape[0]`` tokens.

    ``block_size``: positions of the position embedding, at least the sequence
    length (None: the sequence length). ``dropout``: the probability of every
    dropout (embeddings, attention weights, residual branches), in [0, 1).
    """
    if len(input_shape) != 1:
        raise ValueError(f"model 'gpt' needs a token input_shape [sequence length], got {list(input_shape)}")
    steps = input_shape[0]
    block_size = steps if block_size is None else block_size
    if block_size < steps:
        raise ValueError(f"model 'gpt': block_size {block_size} is shorter than the sequence length {steps} "
                         f"(input_shape {list(input_shape)})")
    if n_embd % n_head:
        raise ValueError(f"model 'gpt': n_embd {n_embd} must be divisible by n_head {n_head}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"model 'gpt': dropout must lie in [0, 1), got {dropout}")
    return GPT(num_classes, block_size, n_layer, n_head, n_embd, dropout)
