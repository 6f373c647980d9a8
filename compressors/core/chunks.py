"""Cache-sized pieces for the dense compressors.

Eager torch makes one pass over memory per operation.  Doing a compressor's
dozen operations piece by piece, on pieces that fit in cache, keeps the
intermediates out of DRAM.  Results do not depend on the piece
size: every piece covers whole units (blocks, buckets, rows).
"""
from __future__ import annotations

CHUNK_ELEMS = 1 << 18  # 1 MiB of float32: the intermediates of a piece stay in L2/L3


def spans(units: int, unit_len: int, multiple: int = 1) -> list[tuple[int, int]]:
    """``[start, stop)`` unit ranges of about ``CHUNK_ELEMS`` elements each.

    Every range but the last holds a multiple of ``multiple`` units (so that
    bit-packed output of a piece starts on a byte boundary).
    """
    per = max(1, CHUNK_ELEMS // max(unit_len, 1))
    per = max(multiple, per // multiple * multiple)
    return [(u, min(u + per, units)) for u in range(0, units, per)]
