"""QSGD on the CPU: the body of compressors.codecs.qsgd.QSGD, bits 2..8, max or l2 norms.

Encode walks the tensor bucket by bucket: a bucket's norm, then its codes
(the bucket is then in cache). Eight codes of b bits fill b bytes exactly,
whatever b, so groups of 8 aligned to the tensor's start are made and packed
in vector IR (``_encode8``: the float32 steps of the reference in 8 lanes, the
counter hash in 32-bit lanes) and stored as one word each; the few entries of
a group that straddles buckets go one by one. Decode unpacks a chunk of
``CHUNK`` codes eight at a time and scales it bucket by bucket. The unpacking
helpers are inlined with ``bits`` a constant, one copy per width, so that
their loops unroll and vectorise.
"""
from __future__ import annotations

import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .common import F32, INLINE, JIT, TREE_DEPTH, absmax, tree_push, tree_total, uniform

_LITTLE = sys.byteorder == "little"  # _store64 writes a word's bytes in memory order
CHUNK = 4096  # codes per scratch: a multiple of 8; the chunk's input stays in L1
_BYTE = np.uint64(0xFF)


@njit(**INLINE)
def _square(v):
    # float64: squares of large float32 values overflow float32; they are exact in float64.
    d = np.float64(v)
    return d * d


@njit(**INLINE)
def _l2(x, lo, hi, sums, levels):
    """The bucket's l2 norm as compressors.core.pairwise sums it: a tree over the squares, float64.

    Whole aligned groups of eight leaves are summed in registers and pushed as one level-3 node.
    ``tree_total`` pads with zeros to the power of two above ``hi - lo``; the reference pads
    a short last bucket further (to its row length, then that length's power of two), but every
    node here is >= +0.0, so those larger zero subtrees add +0.0 and change nothing.
    """
    depth = 0
    i = lo
    while i + 8 <= hi:
        left = (_square(x[i]) + _square(x[i + 1])) + (_square(x[i + 2]) + _square(x[i + 3]))
        right = (_square(x[i + 4]) + _square(x[i + 5])) + (_square(x[i + 6]) + _square(x[i + 7]))
        depth = tree_push(sums, levels, depth, left + right, 3)
        i += 8
    for j in range(i, hi):
        depth = tree_push(sums, levels, depth, _square(x[j]), 0)
    return F32(np.sqrt(tree_total(sums, levels, depth, hi - lo)))


@njit(**INLINE)
def _value(code, sign):
    level = F32(code & (sign - np.uint8(1)))
    return -level if code >= sign else level


def _splat(ty, value, lanes):
    return ir.Constant(ir.VectorType(ty, lanes), [value] * lanes)


def _vsplat(builder, value, lanes):
    """A <lanes x T> of one runtime value."""
    vec_ty = ir.VectorType(value.type, lanes)
    v = builder.insert_element(ir.Constant(vec_ty, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def _uniforms(builder, index, key, lanes):
    """common.uniform of the indices index...index+lanes-1, index and key i32 (the hash wraps as
    the reference's uint32 arithmetic)."""
    i32 = ir.IntType(32)
    x = builder.add(_vsplat(builder, index, lanes), ir.Constant(ir.VectorType(i32, lanes), list(range(lanes))))
    x = builder.mul(x, _splat(i32, 0x9E3779B1, lanes))
    x = builder.xor(x, _vsplat(builder, key, lanes))
    x = builder.xor(x, builder.lshr(x, _splat(i32, 16, lanes)))
    x = builder.mul(x, _splat(i32, 0x85EBCA6B, lanes))
    x = builder.xor(x, builder.lshr(x, _splat(i32, 13, lanes)))
    x = builder.mul(x, _splat(i32, 0xC2B2AE35, lanes))
    x = builder.xor(x, builder.lshr(x, _splat(i32, 16, lanes)))
    u = builder.sitofp(builder.lshr(x, _splat(i32, 8, lanes)), ir.VectorType(ir.FloatType(), lanes))  # < 2**24: exact
    return builder.fmul(u, _splat(ir.FloatType(), 2.0 ** -24, lanes))


def _codes(context, builder, signature, args, lanes):
    """<lanes x i8>: the codes of x[i:i+lanes] (args x, i, index, norm, s, key, sign: global indices
    index...) as _encode_one gives them, in vector IR, with the hash in 32-bit lanes.

    The float32 steps are the reference's, in its order; two of its clamps are left out where they
    change nothing: r = |x| / norm * s is >= +0 or NaN (norm is), and floor + (u < r - floor) <= s
    (u < r - floor needs r > floor, so floor < s)."""
    xa = context.make_array(signature.args[0])(context, builder, args[0])
    i32, f32 = ir.IntType(32), ir.FloatType()
    f32v, i32v = ir.VectorType(f32, lanes), ir.VectorType(i32, lanes)
    at = context.cast(builder, args[1], signature.args[1], types.intp)
    v = builder.load(builder.bitcast(builder.gep(xa.data, [at]), f32v.as_pointer()), align=4)
    norm, s = _vsplat(builder, args[3], lanes), _vsplat(builder, args[4], lanes)
    zero = ir.Constant(f32v, None)
    unary = ir.FunctionType(f32v, [f32v])
    fabs = cgutils.get_or_insert_function(builder.module, unary, f"llvm.fabs.v{lanes}f32")
    floor_fn = cgutils.get_or_insert_function(builder.module, unary, f"llvm.floor.v{lanes}f32")
    r = builder.fmul(builder.fdiv(builder.call(fabs, [v]), norm), s)
    r = builder.select(builder.fcmp_unordered("uno", r, r), zero, r)
    r = builder.select(builder.fcmp_ordered("<", r, s), r, s)
    floor = builder.call(floor_fn, [r])
    index = builder.trunc(context.cast(builder, args[2], signature.args[2], types.int64), i32)
    key = builder.trunc(context.cast(builder, args[5], signature.args[5], types.int64), i32)
    up = builder.fcmp_ordered("<", _uniforms(builder, index, key, lanes), builder.fsub(r, floor))
    level = builder.add(builder.fptosi(floor, i32v), builder.zext(up, i32v))
    sign = _vsplat(builder, builder.zext(args[6], i32), lanes)
    code = builder.or_(level, builder.select(builder.fcmp_ordered("<", v, zero), sign, ir.Constant(i32v, None)))
    return builder.trunc(code, ir.VectorType(ir.IntType(8), lanes))


def _pack_bytes(builder, word, bits):
    """Each i64 of ``word`` (an i64 or <k x i64>) holds 8 codes, one a byte (code j in byte j); gives
    them packed to its low 8 * bits bits, code j at bit j * bits: pairs, then quads, then the two
    halves are joined (shift amounts from ``bits``, an i64, at run time)."""
    i64 = ir.IntType(64)
    lanes = word.type.count if isinstance(word.type, ir.VectorType) else None

    def const(c):
        return ir.Constant(i64, c) if lanes is None else _splat(i64, c, lanes)

    def amount(value):
        return value if lanes is None else _vsplat(builder, value, lanes)

    for mask, width in ((0x00FF00FF00FF00FF, 8), (0x0000FFFF0000FFFF, 16), (0x00000000FFFFFFFF, 32)):
        # lanes of ``width`` bits holding width / 8 * bits bits each: join each odd one to the even below
        low = builder.and_(word, const(mask))
        shift = builder.sub(ir.Constant(i64, width), builder.mul(bits, ir.Constant(i64, width // 8)))
        word = builder.or_(low, builder.lshr(builder.xor(word, low), amount(shift)))
    return word


def _f32_c(x):
    return isinstance(x, types.Array) and x.ndim == 1 and x.layout == "C" and x.dtype == types.float32


def _u8_c(a):
    return isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == types.uint8


def _encode_args_ok(x, i, index, key, bits):
    return (_f32_c(x) and isinstance(i, types.Integer) and isinstance(index, types.Integer)
            and isinstance(key, types.Integer) and isinstance(bits, types.Integer))


@intrinsic
def _encode8(typingctx, x, i, index, norm, s, key, sign, bits):
    """The 8 codes of x[i:i+8] (global indices index...) packed into the low 8 * bits bits of a
    uint64, code j at bit j * bits (little-endian, as _pack_word)."""
    if not _encode_args_ok(x, i, index, key, bits):
        return None
    sig = types.uint64(x, i, index, types.float32, types.float32, key, types.uint8, bits)

    def codegen(context, builder, signature, args):
        word = builder.bitcast(_codes(context, builder, signature, args, 8), ir.IntType(64))
        return _pack_bytes(builder, word, context.cast(builder, args[7], signature.args[7], types.int64))
    return sig, codegen


@intrinsic
def _encode32(typingctx, x, i, index, norm, s, key, sign, bits, packed, at):
    """_encode8 of the 4 groups of 8 from x[i] on, their words stored (8 bytes each, in order) at
    packed[at + k * bits] for k = 0..3: packed must hold at + 3 * bits + 8 bytes."""
    if not (_encode_args_ok(x, i, index, key, bits) and _u8_c(packed) and isinstance(at, types.Integer)):
        return None
    sig = types.void(x, i, index, types.float32, types.float32, key, types.uint8, bits, packed, at)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        words = builder.bitcast(_codes(context, builder, signature, args, 32), ir.VectorType(i64, 4))
        width = context.cast(builder, args[7], signature.args[7], types.int64)
        words = _pack_bytes(builder, words, width)
        pa = context.make_array(signature.args[8])(context, builder, args[8])
        start = context.cast(builder, args[9], signature.args[9], types.intp)
        for k in range(4):
            where = builder.add(start, builder.mul(width, ir.Constant(i64, k)))
            ptr = builder.bitcast(builder.gep(pa.data, [where]), i64.as_pointer())
            builder.store(builder.extract_element(words, ir.Constant(ir.IntType(32), k)), ptr, align=1)
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _store64(typingctx, a, at, word):
    """a[at:at+8] = the 8 bytes of ``word``, little-endian (one unaligned store)."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == types.uint8
            and isinstance(at, types.Integer) and word == types.uint64):
        return None
    sig = types.void(a, at, word)

    def codegen(context, builder, signature, args):
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        index = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = builder.bitcast(builder.gep(arr.data, [index]), ir.IntType(64).as_pointer())
        builder.store(args[2], ptr, align=1)
        return context.get_dummy_value()
    return sig, codegen


@njit(**INLINE)
def _encode_one(v, index, norm, s, key, sign):
    # Divide (not multiply by s / norm) as the reference does: s / norm overflows for denormal norms.
    r = abs(v) / norm * s
    r = F32(0.0) if np.isnan(r) else r
    r = min(max(r, F32(0.0)), s)  # nan_to_num maps +inf to FLT_MAX, which the clamp takes to s
    floor = np.floor(r)
    level = min(floor + F32(uniform(key, index) < r - floor), s)
    return np.uint8(level) | (sign if v < F32(0.0) else np.uint8(0))


@njit(**JIT)
def _decode_range(codes, scale, sign, out, add):
    """out = (``add``: +=) the signed levels of ``codes`` times the bucket's scale."""
    if add:
        for j in range(out.size):
            out[j] += _value(codes[j], sign) * scale
    else:
        for j in range(out.size):
            out[j] = _value(codes[j], sign) * scale


@njit(**INLINE)
def _unpack(packed, at, count, bits, codes):
    """Inverse of _pack; the padding bits after the last code are ignored, as the reference does."""
    mask = np.uint64((1 << bits) - 1)
    groups = count // 8
    for g in range(groups):
        word = np.uint64(0)
        for k in range(bits):
            word |= np.uint64(packed[at + g * bits + k]) << np.uint64(8 * k)
        for j in range(8):
            codes[8 * g + j] = np.uint8((word >> np.uint64(j * bits)) & mask)
    tail = count - 8 * groups
    if tail:
        word = np.uint64(0)
        for k in range((tail * bits + 7) // 8):
            word |= np.uint64(packed[at + groups * bits + k]) << np.uint64(8 * k)
        for j in range(tail):
            codes[8 * groups + j] = np.uint8((word >> np.uint64(j * bits)) & mask)


@njit(**INLINE)
def _unpack_bits(packed, at, count, bits, codes):
    if bits == 2:
        _unpack(packed, at, count, 2, codes)
    elif bits == 3:
        _unpack(packed, at, count, 3, codes)
    elif bits == 4:
        _unpack(packed, at, count, 4, codes)
    elif bits == 5:
        _unpack(packed, at, count, 5, codes)
    elif bits == 6:
        _unpack(packed, at, count, 6, codes)
    elif bits == 7:
        _unpack(packed, at, count, 7, codes)
    else:
        _unpack(packed, at, count, 8, codes)


@njit(**INLINE)
def _put_word(packed, at, word, nbytes):
    """packed[at:at+nbytes] = the low bytes of ``word`` (little-endian). One 8-byte store where the
    buffer has room: its bytes past ``nbytes`` are zeros, overwritten by the next groups' words."""
    if _LITTLE and at + 8 <= packed.size:
        _store64(packed, at, word)
    else:
        for k in range(nbytes):
            packed[at + k] = np.uint8((word >> np.uint64(8 * k)) & _BYTE)


@njit(**INLINE)
def _pack_word(codes, count, bits):
    word = np.uint64(0)
    for j in range(count):
        word |= np.uint64(codes[j]) << np.uint64(j * bits)
    return word


@njit(**JIT)
def _encode_groups(x, first, norm, s, key, sign, bits, packed, at):
    """The packed codes of ``x`` (a whole number of groups of 8, global indices ``first...``, one
    norm) from byte ``at`` of ``packed`` on: 32 entries (4 groups, 4 * bits bytes) at a time while
    their last 8-byte store fits in ``packed``, then group by group."""
    quads = x.size // 32
    while quads > 0 and at + (4 * quads - 1) * bits + 8 > packed.size:
        quads -= 1
    for q in range(quads):
        _encode32(x, 32 * q, first + 32 * q, norm, s, key, sign, bits, packed, at + 4 * q * bits)
    for g in range(4 * quads, x.size // 8):
        _put_word(packed, at + g * bits, _encode8(x, 8 * g, first + 8 * g, norm, s, key, sign, bits), bits)


@njit(**JIT)
def encode(x, key, bits, bucket, l2, norms, packed):
    """Write the norms (one per bucket of ``bucket`` entries, the last may be short) and the packed
    codes of float32 ``x`` under the counter-hash ``key`` (rng.stream_key).

    Bucket by bucket: its norm (the bucket is then in cache for its codes), then its codes. Groups
    of 8 codes (aligned to the tensor's start: b bytes each, whatever b) that lie in the bucket
    are made and packed in vector IR (_encode8); the entries of a group shared with a neighbouring
    bucket go one by one to ``pending``, packed when the group is complete (or the tensor ends)."""
    n = x.size
    s = F32((1 << (bits - 1)) - 1)
    sign = np.uint8(1 << (bits - 1))
    pending = np.zeros(8, np.uint8)
    sums = np.empty(TREE_DEPTH, np.float64)  # the l2 tree's stack
    levels = np.empty(TREE_DEPTH, np.int64)
    for b in range((n + bucket - 1) // bucket):
        lo = b * bucket
        hi = min(lo + bucket, n)
        norm = _l2(x, lo, hi, sums, levels) if l2 else absmax(x, lo, hi)
        norms[b] = norm
        i = lo
        while i < hi and i & 7:  # the end of a group begun in an earlier bucket
            pending[i & 7] = _encode_one(x[i], i, norm, s, key, sign)
            i += 1
            if i & 7 == 0:
                _put_word(packed, (i - 8) // 8 * bits, _pack_word(pending, 8, bits), bits)
        groups = (hi - i) // 8
        if groups > 0:
            _encode_groups(x[i:i + 8 * groups], i, norm, s, key, sign, bits, packed, i // 8 * bits)
            i += 8 * groups
        while i < hi:  # the start of a group that ends in a later bucket (or the tensor's last)
            pending[i & 7] = _encode_one(x[i], i, norm, s, key, sign)
            i += 1
    tail = n & 7
    if tail:
        at = n // 8 * bits
        _put_word(packed, at, _pack_word(pending, tail, bits), packed.size - at)


@njit(**JIT)
def decode(norms, packed, bits, bucket, out, add):
    """Write (``add``: add, in float32) the decoded values into ``out``: level * (norm / s), signed."""
    n = out.size
    s = F32((1 << (bits - 1)) - 1)
    sign = np.uint8(1 << (bits - 1))
    codes = np.empty(CHUNK, np.uint8)
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        _unpack_bits(packed, start // 8 * bits, stop - start, bits, codes)
        i = start
        while i < stop:
            b = i // bucket
            hi = min((b + 1) * bucket, stop)
            # The scale first, as the reference's norms / levels: value * (norm / s), not value * norm / s.
            scale = norms[b] / s
            _decode_range(codes[i - start:hi - start], scale, sign, out[i:hi], add)
            i = hi
