"""Little-endian bit packing: code i occupies bits [i*b, (i+1)*b) of the stream."""
from __future__ import annotations

import torch


def packed_nbytes(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack ``codes`` (integers < 2**bits, any int dtype) into bytes."""
    n = codes.numel()
    out_len = packed_nbytes(n, bits)
    if bits == 8:
        return codes.to(torch.uint8)
    if 8 % bits == 0:
        return _pack_within_bytes(codes.to(torch.uint8), bits)
    # Eight codes of b bits fill exactly b bytes: build each group as one int64.
    groups = -(-n // 8)
    padded = torch.zeros(groups * 8, dtype=torch.int64, device=codes.device)
    padded[:n] = codes
    shifts = torch.arange(0, 8 * bits, bits, dtype=torch.int64, device=codes.device)
    words = (padded.view(groups, 8) << shifts).sum(dim=1)
    return words.view(torch.uint8).view(groups, 8)[:, :bits].reshape(-1)[:out_len]


def unpack(data: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """Inverse of :func:`pack`: ``count`` codes as int64."""
    if bits == 8:
        return data[:count].to(torch.int64)
    if 8 % bits == 0:
        shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=data.device)
        return ((data.view(-1, 1) >> shifts) & ((1 << bits) - 1)).reshape(-1)[:count].to(torch.int64)
    groups = -(-count // 8)
    stream = torch.zeros(groups * bits, dtype=torch.uint8, device=data.device)
    stream[: data.numel()] = data
    buf = torch.zeros(groups, 8, dtype=torch.uint8, device=data.device)
    buf[:, :bits] = stream.view(groups, bits)
    words = buf.view(torch.int64)
    shifts = torch.arange(0, 8 * bits, bits, dtype=torch.int64, device=data.device)
    return ((words >> shifts) & ((1 << bits) - 1)).reshape(-1)[:count]


def _pack_within_bytes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes of a width dividing 8: ``8 // bits`` codes per byte, OR-ed in place."""
    per = 8 // bits
    n = codes.numel()
    padded = codes.reshape(-1)
    if n % per:
        padded = torch.nn.functional.pad(padded, (0, per - n % per))
    lanes = padded.view(-1, per)
    out = lanes[:, 0].clone()
    for i in range(1, per):
        out |= lanes[:, i] << (i * bits)
    return out


def pack_signs(mask: torch.Tensor) -> torch.Tensor:
    """One bit per element of a boolean ``mask``."""
    return _pack_within_bytes(mask.to(torch.uint8), 1)


def unpack_signs(data: torch.Tensor, count: int) -> torch.Tensor:
    return unpack(data, 1, count).bool()
