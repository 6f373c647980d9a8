"""Top-k and adaptive (compressors.codecs.topk, .adaptive): exact selection by a radix select, then the bodies;
adaptive's sampled selection (LBANN's thresholds and means from random samples).

The selection ranks the reference's ``nan_to_num(|v|, nan=inf)`` as integer
keys (see ``magnitude_key``). One histogram pass over all ``n`` keys finds
the bin of the 16-bit top digit that holds the k-th largest; a second pass
lists the indices above that bin (all of them taken) and those in it (the
candidates); a histogram of the 15-bit low digit over the candidates alone
finds the threshold and how many ties at it are taken, by ascending index.
The two ascending lists are then merged: two passes over the input, no sort.

Decoders validate the whole payload before writing into ``out`` and return 0,
or 1 + the number of the first check that failed, in the order the reference
runs its checks (the codecs word the messages).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .common import F32, INLINE, JIT, bits_f32, uniform

_LOW_BITS = 15  # keys have 31 bits: a 16-bit top digit, a 15-bit low one
_LOW_MASK = (1 << _LOW_BITS) - 1
_INF = 0x7F800000
# compressors.codecs.adaptive's sample sizes (LBANN's).
THRESHOLD_SAMPLES = 1024
MEAN_SAMPLES = 128


@njit(**INLINE)
def magnitude_key(word):
    """nan_to_num(|v|, nan=inf) of float32 bits as an int64 that orders alike: the bits without the
    sign, inf lowered to the largest finite float (nan_to_num's posinf default) and every NaN set
    to inf, so a NaN outranks an inf, which ties with 3.4e38."""
    key = np.int64(word) & 0x7FFFFFFF
    if key >= _INF:
        key = _INF if key > _INF else _INF - 1
    return key


@njit(**JIT)
def select_largest(bits, k, out):
    """Write the ascending indices of the ``k`` largest magnitudes of float32 ``bits`` (uint32) into
    int32 ``out`` (``k`` long): every key above the k-th largest, then ties by ascending index."""
    n = bits.size
    if k == 0:
        return
    top = np.zeros(1 << (31 - _LOW_BITS), np.int32)
    for i in range(n):
        top[magnitude_key(bits[i]) >> _LOW_BITS] += 1
    # The bin of the k-th largest key; ``above`` keys lie in higher bins, all taken.
    b = top.size - 1
    above = 0
    while above + top[b] < k:
        above += top[b]
        b -= 1
    # Branch-free: each index is stored in both lists and kept by advancing the count. ``above``
    # < k, so ``out`` has room for the one slot past the kept ones.
    low_edge = np.int64(b) << _LOW_BITS
    high_edge = low_edge + (1 << _LOW_BITS)
    candidates = np.empty(top[b] + 1, np.int32)
    kept = 0
    seen = 0
    for i in range(n):
        key = magnitude_key(bits[i])
        out[kept] = i
        candidates[seen] = i
        kept += np.int64(key >= high_edge)
        seen += np.int64((key >= low_edge) & (key < high_edge))
    # The threshold's low digit among the candidates, and how many ties at it are taken.
    wanted = k - above
    low = np.zeros(1 << _LOW_BITS, np.int32)
    for j in range(seen):
        low[magnitude_key(bits[candidates[j]]) & _LOW_MASK] += 1
    d = low.size - 1
    taken = 0
    while taken + low[d] < wanted:
        taken += low[d]
        d -= 1
    room = wanted - taken
    m = 0
    for j in range(seen):
        i = candidates[j]
        digit = magnitude_key(bits[i]) & _LOW_MASK
        if digit == d:
            if room == 0:
                continue
            room -= 1
        if digit >= d:
            candidates[m] = i
            m += 1
    # Merge from the back: out[:above] and candidates[:wanted] into out[:k], in place.
    a = above - 1
    c = wanted - 1
    for p in range(k - 1, -1, -1):
        if c < 0:
            break  # what is left of out[:above] is already in place
        if a >= 0 and out[a] > candidates[c]:
            out[p] = out[a]
            a -= 1
        else:
            out[p] = candidates[c]
            c -= 1


# ---------------------------------------------------------------- topk


@njit(**JIT)
def topk_encode(bits, values, idx):
    """The ``idx.size`` largest: their bits into ``values`` (uint32), ascending indices into ``idx``."""
    select_largest(bits, idx.size, idx)
    for j in range(idx.size):
        values[j] = bits[idx[j]]


@njit(**JIT)
def topk_check(idx, n):
    """0 where ``idx`` are sent indices of a tensor of ``n``; 1 an index outside [0, n), 2 indices not
    strictly ascending."""
    for j in range(idx.size):
        if idx[j] < 0 or idx[j] >= n:
            return 1
    for j in range(1, idx.size):
        if idx[j] <= idx[j - 1]:
            return 2
    return 0


@njit(**JIT)
def topk_scatter(values, idx, out, add):
    """out[idx] (+)= values (checked indices: ``topk_check``); the caller zeroes the rest of ``out`` first
    where it does not add (numpy's fill runs at memset's speed, a loop here at 2/3 of it)."""
    if add:
        for j in range(idx.size):
            out[idx[j]] += values[j]
    else:
        for j in range(idx.size):
            out[idx[j]] = values[j]


# ---------------------------------------------------------------- adaptive


@njit(**INLINE)
def _put(entries, j, wide, value):
    """Entry ``j``, little-endian, in 4 bytes when ``wide`` else 2."""
    if wide:
        for t in range(4):
            entries[4 * j + t] = np.uint8((value >> (8 * t)) & 0xFF)
    else:
        entries[2 * j] = np.uint8(value & 0xFF)
        entries[2 * j + 1] = np.uint8(value >> 8)


@njit(**INLINE)
def _get(entries, j, wide):
    """Entry ``j`` as the reference reads it: a signed int32 when ``wide``, else an uint16."""
    if wide:
        value = np.int64(0)
        for t in range(4):
            value |= np.int64(entries[4 * j + t]) << (8 * t)
        return value - (np.int64(1) << 32) if value >= (1 << 31) else value
    return np.int64(entries[2 * j]) | np.int64(entries[2 * j + 1]) << 8


@njit(**JIT)
def adaptive_encode(bits, k, rows, cols, ints, floats, entries, wide):
    """``bits``: the groups' matrix (rows = groups), flat. ``ints`` and ``floats`` view the body's
    head (total, group offsets, positive means, negative means) as int32 and float32; ``entries``
    is the rest (uint8). Sums in float64 in ascending
    index order, as the reference's CPU index_add_ makes them."""
    idx = np.empty(k, np.int32)
    select_largest(bits, k, idx)
    sums = np.zeros(2 * rows, np.float64)
    counts = np.zeros(2 * rows, np.int64)
    for j in range(k):
        i = np.int64(idx[j])
        row = i // cols
        v = bits_f32(bits[i])
        negative = np.int64(v < F32(0.0))
        sums[2 * row + negative] += np.float64(v)
        counts[2 * row + negative] += 1
        _put(entries, j, wide, (i - row * cols) << 1 | negative)
    ints[0] = k
    offset = 0
    for r in range(rows):
        ints[1 + r] = offset
        offset += counts[2 * r] + counts[2 * r + 1]
        for side in range(2):
            c = counts[2 * r + side]
            floats[1 + (1 + side) * rows + r] = F32(sums[2 * r + side] / c) if c > 0 else F32(0.0)


@njit(**INLINE)
def _position(key, index, bound):
    """A position in [0, bound) from the counter hash (compressors.codecs.adaptive._positions)."""
    return (np.int64(uniform(key, index) * F32(16777216.0)) * bound) >> 24


@njit(**INLINE)
def _sparse_tree_sum(at, values, m, levels):
    """compressors.core.pairwise's tree over 2**levels leaves, zero but for the ``m`` at ascending
    positions ``at`` (overwritten, as ``values``): level by level, a node with one child present
    is that child, as child + 0.0 is for the nonzero values of one sign that the means sum."""
    for _ in range(levels):
        i = 0
        j = 0
        while i < m:
            parent = at[i] >> 1
            v = values[i]
            if i + 1 < m and at[i + 1] >> 1 == parent:
                v = v + values[i + 1]
                i += 2
            else:
                i += 1
            at[j] = parent
            values[j] = v
            j += 1
        m = j
    return values[0] if m > 0 else 0.0


@njit(**JIT)
def adaptive_sampled_encode(bits, key, keep, capacity, rows, cols, ints, floats, entries, wide):
    """compressors.codecs.adaptive._sampled, then the body as ``adaptive_encode`` writes it; the entries
    after the ones sent, up to ``capacity``, are zero bytes."""
    n = bits.size
    width = 4 if wide else 2
    if n == 0:
        ints[0] = 0
        entries[:capacity * width] = 0
        return
    # The thresholds: of the ``keep`` largest sample keys, the smallest of each sign.
    samples = min(n, THRESHOLD_SAMPLES)
    keys = np.empty(samples, np.int64)
    negative = np.empty(samples, np.bool_)
    for j in range(samples):
        i = j if n <= THRESHOLD_SAMPLES else _position(key, j, n)
        keys[j] = magnitude_key(bits[i])
        negative[j] = bits_f32(bits[i]) < F32(0.0)
    top = np.sort(keys)[samples - keep]
    none = np.int64(_INF + 1)  # above every key
    low_pos = none
    low_neg = none
    for j in range(samples):
        if keys[j] >= top:
            if negative[j]:
                low_neg = min(low_neg, keys[j])
            else:
                low_pos = min(low_pos, keys[j])
    if low_pos == none:
        low_pos = low_neg
    if low_neg == none:
        low_neg = low_pos
    low_pos = max(low_pos, 1)
    low_neg = max(low_neg, 1)
    # Group by group: the entries sent, up to the capacity (a non-finite one poisons its side's
    # mean), then the means from the group's sample positions, while the group is in cache.
    per_group = min(cols, MEAN_SAMPLES)
    levels = 0
    while (1 << levels) < per_group:
        levels += 1
    # The sent samples of each side: their positions among the group's samples, their values.
    at_pos = np.empty(per_group, np.int64)
    at_neg = np.empty(per_group, np.int64)
    values_pos = np.empty(per_group, np.float64)
    values_neg = np.empty(per_group, np.float64)
    fallback_pos = np.float64(bits_f32(np.uint32(low_pos)))
    fallback_neg = -np.float64(bits_f32(np.uint32(low_neg)))
    sent = 0
    for r in range(rows):
        ints[1 + r] = min(sent, capacity)
        poison_pos = 0.0
        poison_neg = 0.0
        for c in range(cols):
            w = bits[r * cols + c]
            v = bits_f32(w)
            neg = np.int64(v < F32(0.0))
            if magnitude_key(w) >= (low_neg if neg else low_pos):
                if sent < capacity:
                    _put(entries, sent, wide, np.int64(c) << 1 | neg)
                sent += 1
                if not np.isfinite(v):
                    if neg:
                        poison_neg += np.float64(v)
                    else:
                        poison_pos += np.float64(v)
        count_pos = 0
        count_neg = 0
        # Branch-free (a sample's sign is a coin flip a branch would mispredict): each sample is
        # stored on both sides and kept by advancing a side's count; count <= t, so it fits.
        for t in range(per_group):
            c = t if cols <= MEAN_SAMPLES else _position(key, THRESHOLD_SAMPLES + MEAN_SAMPLES * r + t, cols)
            w = bits[r * cols + c]
            v = bits_f32(w)
            neg = v < F32(0.0)
            taken = magnitude_key(w) >= (low_neg if neg else low_pos)
            at_pos[count_pos] = t
            at_neg[count_neg] = t
            values_pos[count_pos] = np.float64(v)
            values_neg[count_neg] = np.float64(v)
            count_pos += np.int64(taken & (not neg))
            count_neg += np.int64(taken & neg)
        mean_pos = (_sparse_tree_sum(at_pos, values_pos, count_pos, levels) / count_pos if count_pos > 0
                    else fallback_pos)
        mean_neg = (_sparse_tree_sum(at_neg, values_neg, count_neg, levels) / count_neg if count_neg > 0
                    else fallback_neg)
        floats[1 + rows + r] = F32(mean_pos + poison_pos)
        floats[1 + 2 * rows + r] = F32(mean_neg + poison_neg)
    total = min(sent, capacity)
    ints[0] = total
    entries[total * width:capacity * width] = 0


@njit(**JIT)
def adaptive_decode(ints, floats, entries, k, exact, rows, cols, stride, step, wide, out, add):
    """Each entry's region mean into (or onto) ``out``, entry ``c`` of group ``r`` at
    ``r * stride + c * step``. Checks: 1 a total other than ``k`` (``exact``) or above it,
    2 offsets not ascending from 0 within [0, total], 3 an index outside [0, cols), 4 indices
    not strictly ascending within a group."""
    total = np.int64(ints[0])
    if total != k if exact else (total < 0 or total > k):
        return 1
    if rows > 0 and ints[1] != 0:
        return 2
    for r in range(rows):
        end = ints[2 + r] if r + 1 < rows else total
        if end < ints[1 + r]:
            return 2
    for j in range(total):
        e = _get(entries, j, wide)
        if e < 0 or e >> 1 >= cols:
            return 3
    # Groups ascend and indices lie in [0, cols): strictly ascending positions in the groups'
    # matrix are exactly strictly ascending indices within each group.
    last = np.int64(-1)
    for r in range(rows):
        end = ints[2 + r] if r + 1 < rows else total
        for j in range(ints[1 + r], end):
            position = r * cols + (_get(entries, j, wide) >> 1)
            if position <= last:
                return 4
            last = position
    if not add:
        out[:] = F32(0.0)
    for r in range(rows):
        end = ints[2 + r] if r + 1 < rows else total
        for j in range(ints[1 + r], end):
            e = _get(entries, j, wide)
            v = floats[1 + 2 * rows + r] if e & 1 else floats[1 + rows + r]
            if add:
                out[r * stride + (e >> 1) * step] += v
            else:
                out[r * stride + (e >> 1) * step] = v
    return 0
