"""1-bit SGD (compressors.codecs.onebit): per row of the groups' matrix (onebit.group_shape; the caller
passes a column grouping transposed), the means of the entries >= 0 and < 0.

The sums behind the means follow compressors.core.pairwise (a pairwise tree in
float64, zero-padded to a power of two), built with a stack of nodes
(common.tree_push). Aligned runs of 32 entries are summed in vector IR
(``_block32``: four groups of 8 transposed into lanes, so each lane adds its
group's leaves in the tree's order) to one level-5 node each; 32 such nodes
are summed level by level to one level-10 node (1024 entries) and pushed. The
rest of a row: aligned groups of 8 summed as
((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7)) and pushed as level-3 nodes, then leaf by
leaf. Bits: 1 for an entry >= 0, little-endian over the flat index; a row
starting on a byte boundary writes whole bytes, one starting mid-byte ORs them
in shifted.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .common import F32, INLINE, JIT, TREE_DEPTH, tree_push, tree_total


@njit(**INLINE)
def _sides(v):
    """(the entry as a positive-side leaf, as a negative-side leaf, whether it is >= 0)."""
    ok = v >= F32(0.0)
    return (np.float64(v) if ok else 0.0), (0.0 if ok else np.float64(v)), ok


@njit(**INLINE)
def _group(x, i):
    """The tree sums of 8 entries from x[i] on (both sides), and their bits as one byte."""
    p0, n0, b0 = _sides(x[i])
    p1, n1, b1 = _sides(x[i + 1])
    p2, n2, b2 = _sides(x[i + 2])
    p3, n3, b3 = _sides(x[i + 3])
    p4, n4, b4 = _sides(x[i + 4])
    p5, n5, b5 = _sides(x[i + 5])
    p6, n6, b6 = _sides(x[i + 6])
    p7, n7, b7 = _sides(x[i + 7])
    sp = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))
    sn = ((n0 + n1) + (n2 + n3)) + ((n4 + n5) + (n6 + n7))
    byte = (b0 | (b1 << 1) | (b2 << 2) | (b3 << 3) | (b4 << 4) | (b5 << 5) | (b6 << 6) | (b7 << 7))
    count = b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7
    return sp, sn, np.uint8(byte), count


@intrinsic
def _block32(typingctx, x, i):
    """32 entries from x[i] on (x C-contiguous): (the level-5 tree node of each side, their bits
    as an int64 of 32 bits, little-endian, how many are >= 0). In vector IR: the entries as 4 groups of 8 are
    transposed so that one <4 x double> holds a leaf of each group, and the groups' level-3 nodes
    are built lane by lane with the tree's additions; then (g0 + g1) + (g2 + g3)."""
    if not (isinstance(x, types.Array) and x.ndim == 1 and x.layout == "C" and x.dtype == types.float32
            and isinstance(i, types.Integer)):
        return None
    sig = types.Tuple((types.float64, types.float64, types.int64, types.int64))(x, i)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        index = context.cast(builder, args[1], signature.args[1], types.intp)
        f32x32 = ir.VectorType(ir.FloatType(), 32)
        f64x4 = ir.VectorType(ir.DoubleType(), 4)
        v = builder.load(builder.bitcast(builder.gep(ary.data, [index]), f32x32.as_pointer()), align=4)
        zero = ir.Constant(f32x32, None)
        ok = builder.fcmp_ordered(">=", v, zero)
        word = builder.bitcast(ok, ir.IntType(32))
        bits = builder.zext(word, ir.IntType(64))
        count = builder.zext(builder.ctpop(word), ir.IntType(64))

        def side(values):
            # column t: entry t of each group, as float64 (exact)
            cols = [builder.fpext(builder.shuffle_vector(values, values, ir.Constant(
                ir.VectorType(ir.IntType(32), 4), [t, 8 + t, 16 + t, 24 + t])), f64x4) for t in range(8)]
            a = lambda p, q: builder.fadd(p, q)  # noqa: E731
            g = a(a(a(cols[0], cols[1]), a(cols[2], cols[3])), a(a(cols[4], cols[5]), a(cols[6], cols[7])))
            e = [builder.extract_element(g, ir.Constant(ir.IntType(32), k)) for k in range(4)]
            return a(a(e[0], e[1]), a(e[2], e[3]))

        sp = side(builder.select(ok, v, zero))
        sn = side(builder.select(ok, zero, v))
        return context.make_tuple(builder, signature.return_type, [sp, sn, bits, count])
    return sig, codegen


@njit(**JIT)
def encode(x, rows, cols, mean_pos, mean_neg, packed):
    x = np.ascontiguousarray(x)  # the caller's array is; a no-op then
    sums_p = np.empty(TREE_DEPTH, np.float64)
    sums_n = np.empty(TREE_DEPTH, np.float64)
    levels_p = np.empty(TREE_DEPTH, np.int64)
    levels_n = np.empty(TREE_DEPTH, np.int64)
    nodes_p = np.empty(32, np.float64)  # the level-5 nodes of a block of 1024 entries
    nodes_n = np.empty(32, np.float64)
    if cols & 7:  # rows then do not all start on a byte, and their bits are OR-ed in
        packed[:] = 0
    for r in range(rows):
        base = r * cols
        shift = base & 7
        depth_p = 0
        depth_n = 0
        count = 0
        # Runs of 32 entries (aligned to the row start): one level-5 node each; 32 of them, summed
        # here level by level, make one level-10 node.
        runs = cols // 32
        if runs > 0:
            pk = packed[base >> 3:(base >> 3) + 4 * runs + 1]
            for b in range(runs):
                sp, sn, bits, c = _block32(x, base + 32 * b)
                count += c
                if shift == 0:
                    pk[4 * b] = np.uint8(bits & 255)
                    pk[4 * b + 1] = np.uint8((bits >> 8) & 255)
                    pk[4 * b + 2] = np.uint8((bits >> 16) & 255)
                    pk[4 * b + 3] = np.uint8(bits >> 24)
                else:
                    w = bits << shift
                    pk[4 * b] |= np.uint8(w & 255)
                    pk[4 * b + 1] |= np.uint8((w >> 8) & 255)
                    pk[4 * b + 2] |= np.uint8((w >> 16) & 255)
                    pk[4 * b + 3] |= np.uint8((w >> 24) & 255)
                    pk[4 * b + 4] |= np.uint8(w >> 32)
                k = b & 31
                nodes_p[k] = sp
                nodes_n[k] = sn
                if k == 31:
                    h = 16
                    while h > 0:
                        for i in range(h):
                            nodes_p[i] = nodes_p[2 * i] + nodes_p[2 * i + 1]
                            nodes_n[i] = nodes_n[2 * i] + nodes_n[2 * i + 1]
                        h >>= 1
                    depth_p = tree_push(sums_p, levels_p, depth_p, nodes_p[0], 10)
                    depth_n = tree_push(sums_n, levels_n, depth_n, nodes_n[0], 10)
            for k in range(runs & 31):
                depth_p = tree_push(sums_p, levels_p, depth_p, nodes_p[k], 5)
                depth_n = tree_push(sums_n, levels_n, depth_n, nodes_n[k], 5)
        # The rest: groups of 8 (level-3 nodes), then leaf by leaf.
        start = 32 * runs
        groups = (cols - start) // 8
        row = x[base + start:base + cols]
        pk = packed[(base + start) >> 3:((base + start) >> 3) + groups + 1]
        for g in range(groups):
            sp, sn, byte, c = _group(row, 8 * g)
            count += c
            if shift == 0:
                pk[g] = byte
            else:
                pk[g] |= np.uint8((np.int64(byte) << shift) & 255)
                pk[g + 1] |= np.uint8(np.int64(byte) >> (8 - shift))
            depth_p = tree_push(sums_p, levels_p, depth_p, sp, 3)
            depth_n = tree_push(sums_n, levels_n, depth_n, sn, 3)
        for j in range(start + 8 * groups, cols):
            i = base + j
            p, q, ok = _sides(x[i])
            count += ok
            if ok:
                packed[i >> 3] |= np.uint8(1 << (i & 7))
            depth_p = tree_push(sums_p, levels_p, depth_p, p, 0)
            depth_n = tree_push(sums_n, levels_n, depth_n, q, 0)
        total_p = tree_total(sums_p, levels_p, depth_p, cols)
        total_n = tree_total(sums_n, levels_n, depth_n, cols)
        mean_pos[r] = F32(total_p / count) if count > 0 else F32(0.0)
        mean_neg[r] = F32(total_n / (cols - count)) if cols - count > 0 else F32(0.0)


@njit(**INLINE)
def _put(out, i, v, add):
    if add:
        out[i] += v
    else:
        out[i] = v


@njit(**JIT)
def decode(packed, rows, cols, mean_pos, mean_neg, out, add):
    """out[i] (+)= its row's positive mean where its bit is 1, else the negative mean."""
    for r in range(rows):
        p = mean_pos[r]
        q = mean_neg[r]
        i = r * cols
        end = i + cols
        while i < end and i & 7:
            _put(out, i, p if (packed[i >> 3] >> np.uint8(i & 7)) & np.uint8(1) else q, add)
            i += 1
        groups = (end - i) >> 3
        # Whole bytes, a loop for each mode, uint8 shifts, and slices indexed from range() values
        # (provably >= 0, so no negative-index fix-up): LLVM then vectorises them.
        pk = packed[i >> 3:(i >> 3) + groups]
        o = out[i:i + 8 * groups]
        if add:
            for g in range(groups):
                byte = pk[g]
                for t in range(8):
                    o[8 * g + t] += p if (byte >> np.uint8(t)) & np.uint8(1) else q
        else:
            for g in range(groups):
                byte = pk[g]
                for t in range(8):
                    o[8 * g + t] = p if (byte >> np.uint8(t)) & np.uint8(1) else q
        i += 8 * groups
        while i < end:
            _put(out, i, p if (packed[i >> 3] >> np.uint8(i & 7)) & np.uint8(1) else q, add)
            i += 1


@njit(**JIT)
def decode_columns(packed, groups, length, mean_pos, mean_neg, out, add):
    """``decode`` of a column grouping straight into ``out`` in the input's order, the C-order
    (length, groups) matrix whose column g is group g (bits g * length ..). Eight rows at a time:
    each group's 8 bits for them are gathered into a byte (the groups' bits are near in cache
    from one block to the next), then each row is written along memory, as in ``decode``."""
    window = np.empty(groups, np.uint8)
    last = packed.size - 1
    full = length - length % 8
    for i0 in range(0, full, 8):
        for g in range(groups):
            b = g * length + i0
            at = b >> 3
            shift = b & 7
            low = np.int64(packed[at])
            high = np.int64(packed[at + 1]) if shift and at < last else np.int64(0)
            window[g] = np.uint8(((low | (high << 8)) >> shift) & 255)
        for t in range(8):
            row = out[(i0 + t) * groups:(i0 + t + 1) * groups]
            shift = np.uint8(t)
            # The operands loaded into locals first: LLVM then vectorises the select (3x here).
            if add:
                for g in range(groups):
                    bit = (window[g] >> shift) & np.uint8(1)
                    p = mean_pos[g]
                    q = mean_neg[g]
                    row[g] += p if bit else q
            else:
                for g in range(groups):
                    bit = (window[g] >> shift) & np.uint8(1)
                    p = mean_pos[g]
                    q = mean_neg[g]
                    row[g] = p if bit else q
    for i in range(full, length):
        for g in range(groups):
            b = g * length + i
            _put(out, i * groups + g,
                 mean_pos[g] if (packed[b >> 3] >> np.uint8(b & 7)) & np.uint8(1) else mean_neg[g], add)


@njit(**INLINE)
def _column8(r0, r1, r2, r3, r4, r5, r6, r7, g):
    """``_group`` down column g of eight rows: the level-3 tree nodes of both sides, the bits as a
    byte (bit t: row t's entry >= 0), how many are >= 0."""
    p0, n0, b0 = _sides(r0[g])
    p1, n1, b1 = _sides(r1[g])
    p2, n2, b2 = _sides(r2[g])
    p3, n3, b3 = _sides(r3[g])
    p4, n4, b4 = _sides(r4[g])
    p5, n5, b5 = _sides(r5[g])
    p6, n6, b6 = _sides(r6[g])
    p7, n7, b7 = _sides(r7[g])
    sp = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))
    sn = ((n0 + n1) + (n2 + n3)) + ((n4 + n5) + (n6 + n7))
    byte = (b0 | (b1 << 1) | (b2 << 2) | (b3 << 3) | (b4 << 4) | (b5 << 5) | (b6 << 6) | (b7 << 7))
    return sp, sn, np.uint8(byte), b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7


@njit(**JIT)
def encode_columns(x, length, groups, mean_pos, mean_neg, packed):
    """``encode`` of a column grouping read in the input's order, without the transpose: ``x`` is
    the C-order (length, groups) matrix whose column g is group g (bits g * length ..), with
    ``length`` a multiple of 8 (each group's bits start on a byte). Eight rows at a time, every
    column's level-3 tree nodes at once (a loop along memory that vectorises); the nodes go up the
    tree as a binary counter of the blocks, the same for every column, so each carry is one
    vector addition; the zero padding up to a power of two closes the tree at the end."""
    blocks = length // 8
    top = 0
    while (1 << top) < blocks:
        top += 1
    pend_p = np.empty((top + 1, groups), np.float64)
    pend_n = np.empty((top + 1, groups), np.float64)
    node_p = np.empty(groups, np.float64)
    node_n = np.empty(groups, np.float64)
    count = np.zeros(groups, np.int64)
    window = np.empty(groups, np.uint8)
    for b in range(blocks):
        base = 8 * b * groups
        # Row slices indexed by range() values (provably >= 0, no negative-index fix-up): the loop
        # then vectorises (indexing x at base + t * groups + g does not, 25x slower).
        r0 = x[base:base + groups]
        r1 = x[base + groups:base + 2 * groups]
        r2 = x[base + 2 * groups:base + 3 * groups]
        r3 = x[base + 3 * groups:base + 4 * groups]
        r4 = x[base + 4 * groups:base + 5 * groups]
        r5 = x[base + 5 * groups:base + 6 * groups]
        r6 = x[base + 6 * groups:base + 7 * groups]
        r7 = x[base + 7 * groups:base + 8 * groups]
        for g in range(groups):
            sp, sn, byte, c = _column8(r0, r1, r2, r3, r4, r5, r6, r7, g)
            node_p[g] = sp
            node_n[g] = sn
            window[g] = byte
            count[g] += c
        for g in range(groups):
            packed[g * blocks + b] = window[g]
        level = 0
        t = b
        while t & 1:  # node (left) + this block's subtree (right), level by level
            lp = pend_p[level]
            ln = pend_n[level]
            for g in range(groups):
                node_p[g] = lp[g] + node_p[g]
                node_n[g] = ln[g] + node_n[g]
            t >>= 1
            level += 1
        pend_p[level, :] = node_p
        pend_n[level, :] = node_n
    # The padding: a pending node at level l is a left child; its right sibling is what came after
    # it (the carry) or a zero subtree (+0.0).
    if blocks == 1 << top:
        node_p[:] = pend_p[top]
        node_n[:] = pend_n[top]
    else:
        carry = False
        for level in range(top):
            if (blocks >> level) & 1:
                lp = pend_p[level]
                ln = pend_n[level]
                if carry:
                    for g in range(groups):
                        node_p[g] = lp[g] + node_p[g]
                        node_n[g] = ln[g] + node_n[g]
                else:
                    for g in range(groups):
                        node_p[g] = lp[g] + 0.0
                        node_n[g] = ln[g] + 0.0
                    carry = True
            elif carry:
                for g in range(groups):
                    node_p[g] = node_p[g] + 0.0
                    node_n[g] = node_n[g] + 0.0
    for g in range(groups):
        c = count[g]
        mean_pos[g] = F32(node_p[g] / c) if c > 0 else F32(0.0)
        mean_neg[g] = F32(node_n[g] / (length - c)) if length - c > 0 else F32(0.0)
