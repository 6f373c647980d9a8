"""Dettmers' dynamic tree and linear 8-bit types, scaled by the absolute maximum (compressors.codecs.scaled8).

Body: the block maxima (float32), then one code per element. ``block = 0``
is one block. Decode checks the codes in a first pass (linear8 never emits
255), so that a refused payload leaves ``out`` untouched.
"""
from __future__ import annotations

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, config
from numba.extending import intrinsic

from .common import F32, INLINE, JIT, absmax, f32_bits


def _has_avx2() -> bool:
    """Whether Numba compiles for a CPU with AVX2 (the host's, unless NUMBA_CPU_NAME/FEATURES say)."""
    if config.CPU_NAME or config.CPU_FEATURES:
        return "+avx2" in (config.CPU_FEATURES or "")
    try:
        return bool(llvm.get_host_cpu_features().get("avx2"))
    except RuntimeError:
        return False


_AVX2 = _has_avx2()  # then the bin table is read with vpgatherdd; else LLVM's generic gather


@njit(**INLINE)
def _block_of(n, block):
    return block if block > 0 else max(n, 1)


def _bin_table(bin_bound, lo_code, hi_code):
    """The three bin tables as one uint32 per bin: the low 15 bits of its bound's float32 bits
    (0x8000 when the bound lies in a later bin: every value of the bin is below it), the code
    below the bound << 16 and the code at/above it << 24. Within a bin (the bits above the low 15
    are the bin's), a < bound is then low15(a) < low15(bound), an integer compare."""
    bits = np.ascontiguousarray(bin_bound, dtype=np.float32).view(np.uint32)
    inside = (bits >> np.uint32(15)) == np.arange(bits.size, dtype=np.uint32)
    threshold = np.where(inside, bits & np.uint32(0x7FFF), np.uint32(0x8000)).astype(np.uint32)
    return (threshold | (lo_code.astype(np.uint32) << np.uint32(16))
            | (hi_code.astype(np.uint32) << np.uint32(24))).astype(np.uint32)


_BIN_TABLES: dict = {}  # id of bin_bound -> (the three tables, their bin table)


def dynamic8_encode(x, block, maxima, codes, floor, bin_bound, lo_code, hi_code):
    """codes[i] = sign << 7 | the table's code of a = clamp(|x| / max, 0, 1) (0 where max is not > 0
    or a is NaN): the bin of a's bits >> 15 holds at most one bound, so one compare picks the
    bin's code below it or above it (one load per entry from _bin_table, made once per tables)."""
    hit = _BIN_TABLES.get(id(bin_bound))
    if hit is None or hit[0][0] is not bin_bound or hit[0][1] is not lo_code or hit[0][2] is not hi_code:
        hit = ((bin_bound, lo_code, hi_code), _bin_table(bin_bound, lo_code, hi_code))
        _BIN_TABLES[id(bin_bound)] = hit
    _dynamic8_encode(x, block, maxima, codes, floor, hit[1])


def _vsplat(builder, value, lanes):
    vec_ty = ir.VectorType(value.type, lanes)
    v = builder.insert_element(ir.Constant(vec_ty, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


@intrinsic
def _dynamic8_codes8(typingctx, x, i, m, table, codes):
    """_dynamic8_encode's loop body for x[i:i+8] into codes[i:i+8], in vector IR: a, its bits, the
    bin table's entries (gathered), the compare, the sign."""
    if not (isinstance(x, types.Array) and x.dtype == types.float32 and x.layout == "C" and x.ndim == 1
            and isinstance(table, types.Array) and table.dtype == types.uint32 and table.layout == "C"
            and isinstance(codes, types.Array) and codes.dtype == types.uint8 and codes.layout == "C"
            and isinstance(i, types.Integer)):
        return None
    sig = types.void(x, i, types.float32, table, codes)

    def codegen(context, builder, signature, args):
        lanes = 8
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        f32v, i32v, i64v = ir.VectorType(f32, lanes), ir.VectorType(i32, lanes), ir.VectorType(i64, lanes)
        xa = context.make_array(signature.args[0])(context, builder, args[0])
        ta = context.make_array(signature.args[3])(context, builder, args[3])
        ca = context.make_array(signature.args[4])(context, builder, args[4])
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        v = builder.load(builder.bitcast(builder.gep(xa.data, [at]), f32v.as_pointer()), align=4)
        zero = ir.Constant(f32v, None)
        fabs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f32v, [f32v]), "llvm.fabs.v8f32")
        m = args[2]
        a = builder.fdiv(builder.call(fabs, [v]), _vsplat(builder, m, lanes))
        a = builder.select(builder.fcmp_ordered(">", m, ir.Constant(f32, 0.0)), a, zero)
        a = builder.select(builder.fcmp_unordered("uno", a, a), zero, a)
        one = ir.Constant(f32v, [1.0] * lanes)
        a = builder.select(builder.fcmp_ordered("<", a, one), a, one)  # a is >= +0 here
        bits = builder.bitcast(a, i32v)
        idx = builder.lshr(bits, ir.Constant(i32v, [15] * lanes))
        if _AVX2:  # one vpgatherdd
            gather = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i32v, [i32v, ir.IntType(8).as_pointer(), i32v, i32v, ir.IntType(8)]),
                "llvm.x86.avx2.gather.d.d.256")
            e = builder.call(gather, [ir.Constant(i32v, [0] * lanes), builder.bitcast(ta.data, ir.IntType(8).as_pointer()),
                                      idx, ir.Constant(i32v, [-1] * lanes), ir.Constant(ir.IntType(8), 4)])
        else:
            base = _vsplat(builder, builder.ptrtoint(ta.data, i64), lanes)
            ptrs = builder.inttoptr(builder.add(base, builder.shl(builder.zext(idx, i64v), ir.Constant(i64v, [2] * lanes))),
                                    ir.VectorType(i32.as_pointer(), lanes))
            gather = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i32v, [ptrs.type, i32, ir.VectorType(ir.IntType(1), lanes), i32v]),
                "llvm.masked.gather.v8i32.v8p0i32")
            e = builder.call(gather, [ptrs, ir.Constant(i32, 4), ir.Constant(ir.VectorType(ir.IntType(1), lanes), [1] * lanes),
                                      ir.Constant(i32v, ir.Undefined)])
        def k(c):
            return ir.Constant(i32v, [c] * lanes)

        below = builder.icmp_signed("<", builder.and_(bits, k(0x7FFF)), builder.and_(e, k(0xFFFF)))
        code = builder.select(below, builder.and_(builder.lshr(e, k(16)), k(0xFF)), builder.lshr(e, k(24)))
        code = builder.or_(code, builder.select(builder.fcmp_ordered("<", v, zero), k(0x80), k(0)))
        out = builder.trunc(code, ir.VectorType(ir.IntType(8), lanes))
        builder.store(out, builder.bitcast(builder.gep(ca.data, [at]), out.type.as_pointer()), align=1)
        return context.get_dummy_value()
    return sig, codegen


@njit(**INLINE)
def _dynamic8_one(v, m, table):
    a = abs(v) / m if m > F32(0.0) else F32(0.0)
    a = F32(0.0) if np.isnan(a) else min(a, F32(1.0))
    bits = f32_bits(a)
    e = table[bits >> np.uint32(15)]
    below = (bits & np.uint32(0x7FFF)) < (e & np.uint32(0xFFFF))
    code = (e >> np.uint32(16)) & np.uint32(0xFF) if below else e >> np.uint32(24)
    return np.uint8(code | (np.uint32(0x80) if v < F32(0.0) else np.uint32(0)))


@njit(**JIT)
def _dynamic8_encode(x, block, maxima, codes, floor, table):
    n = x.size
    row = _block_of(n, block)
    for b in range(maxima.size):
        lo, hi = b * row, min(b * row + row, n)
        m = absmax(x, lo, hi)
        if floor > m:  # the whole tensor's maximum (sra, scope tensor); false for a NaN floor or max
            m = floor
        maxima[b] = m
        groups = (hi - lo) // 8
        for g in range(groups):
            _dynamic8_codes8(x, lo + 8 * g, m, table, codes)
        for i in range(lo + 8 * groups, hi):
            codes[i] = _dynamic8_one(x[i], m, table)


@njit(**JIT)
def linear8_encode(x, block, maxima, codes, floor):
    """codes[i] = clamp(rint(x / max * 127), -127, 127) + 127 (0 + 127 where max is not > 0 or NaN);
    max is raised to ``floor`` where that is larger (0: no floor)."""
    n = x.size
    row = _block_of(n, block)
    for b in range(maxima.size):
        lo, hi = b * row, min(b * row + row, n)
        m = absmax(x, lo, hi)
        if floor > m:
            m = floor
        maxima[b] = m
        xs, cs = x[lo:hi], codes[lo:hi]  # indexed from range(): no negative-index fix-up
        for i in range(hi - lo):
            q = np.rint(xs[i] / m * F32(127.0)) if m > F32(0.0) else F32(0.0)
            q = F32(0.0) if q != q else min(max(q, F32(-127.0)), F32(127.0))
            cs[i] = np.uint8(np.int32(q) + 127)


@njit(**JIT)
def has_code(codes, code):
    """Whether ``code`` is among ``codes``: an OR over blocks of 4096 (vectorised, no exit in the
    loop), the first block that has it ends the search."""
    n = codes.size
    for start in range(0, n, 4096):
        cs = codes[start:min(start + 4096, n)]
        hit = np.uint8(0)
        for i in range(cs.size):
            hit |= np.uint8(cs[i] == code)
        if hit:
            return True
    return False


@njit(**JIT)
def decode(codes, maxima, block, value_of_code, out, add):
    """out[i] (+)= value_of_code[codes[i]] * its block's maximum, in float32."""
    n = codes.size
    row = _block_of(n, block)
    for b in range(maxima.size):
        lo, hi = b * row, min(b * row + row, n)
        m = maxima[b]
        cs, os = codes[lo:hi], out[lo:hi]  # indexed from range(): no negative-index fix-up
        if add:
            for i in range(hi - lo):
                os[i] += value_of_code[cs[i]] * m
        else:
            for i in range(hi - lo):
                os[i] = value_of_code[cs[i]] * m


_LINEAR_STEP = F32(1.0 / 127.0)


@njit(**JIT)
def linear8_decode(codes, maxima, block, out, add):
    """decode for linear8, whose table is (code - 127) * (1 / 127) in float32: that value, computed
    (no gather, so the loops vectorise), times the block's maximum. The same bits as the table for
    each of the 256 codes (tests/compressors/kernels/test_kernels.py compares the decodes)."""
    n = codes.size
    row = _block_of(n, block)
    for b in range(maxima.size):
        lo, hi = b * row, min(b * row + row, n)
        m = maxima[b]
        cs, os = codes[lo:hi], out[lo:hi]  # indexed from range(): no negative-index fix-up
        if add:
            for i in range(hi - lo):
                os[i] += ((F32(cs[i]) - F32(127.0)) * _LINEAR_STEP) * m
        else:
            for i in range(hi - lo):
                os[i] = ((F32(cs[i]) - F32(127.0)) * _LINEAR_STEP) * m
