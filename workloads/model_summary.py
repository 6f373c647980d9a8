"""Size of a model's gradient, and how much of it a compressor would see."""

from __future__ import annotations

from torch import nn

FP32_BYTES = 4


def model_summary(model: nn.Module, min_compress_numel: int = 1024) -> dict[str, int | float]:
    """``parameters`` (all), ``grad_bytes_fp32`` (trainable ones, 4 bytes each) and
    ``compressible_share``: the share of those bytes in tensors with at least
    ``min_compress_numel`` elements, which the reducer compresses (smaller ones,
    biases and norms, go through one fp32 allreduce); 0.0 without trainable parameters.
    """
    parameters = sum(p.numel() for p in model.parameters())
    trainable = [p.numel() for p in model.parameters() if p.requires_grad]
    grad_bytes = FP32_BYTES * sum(trainable)
    compressible = FP32_BYTES * sum(n for n in trainable if n >= min_compress_numel)
    return {
        "parameters": parameters,
        "grad_bytes_fp32": grad_bytes,
        "compressible_share": compressible / grad_bytes if grad_bytes else 0.0,
    }
