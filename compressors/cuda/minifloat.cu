// fp8 and mx (compressors/codecs/fp8.py, mx.py; the Numba kernels: kernels/minifloat.py): rounding a
// float32 to a narrow float type on its bits, the same codes as the CPU kernels.
//
// Grid-stride loops, one entry per thread and round: the blocks' absolute maxima by atomicMax over
// |x|'s bits (a NaN's bits exceed inf's, so it wins as in torch), then each entry's code from its
// block's scale, which every thread recomputes from the maximum (the block's first entry writes it).
// mx codes are written a byte each, then packed at 6 or 4 bits by a second kernel.

// The round-to-nearest-even code of the magnitude with float32 bits a (finite, sign clear): in the
// type's normal range the float32 mantissa's low 23 - mbits bits decide (ties: the kept bits' lowest
// makes it even), a carry moving into the exponent field; below its smallest normal, rint of a times
// 2**(bias - 1 + mbits) counts subnormal steps. Saturated at max_code.
__device__ __forceinline__ int mf_rne_code(u32 a, int mbits, int bias, int max_code) {
    const u32 shift = 23u - (u32)mbits;
    int code;
    if (a < ((u32)(128 - bias) << 23)) {
        const float scale = __uint_as_float((u32)(127 + bias - 1 + mbits) << 23);  // a power of two: exact
        code = (int)rintf(__uint_as_float(a) * scale);
    } else {
        const u32 rounded = a + ((1u << (shift - 1u)) - 1u) + ((a >> shift) & 1u);
        code = (int)(rounded >> shift) - ((127 - bias) << mbits);
    }
    return code < max_code ? code : max_code;
}

// Between the magnitudes around a (at most the largest), the upper with probability
// (a - lower) / (upper - lower) in float64 (compressors.core.minifloat.round_to's).
__device__ __forceinline__ int mf_stochastic(float a, int nearest, float u, const double* __restrict__ mags) {
    const double value = mags[nearest];
    const double a64 = (double)a;
    if (value == a64) return nearest;
    const int lo = value > a64 ? nearest - 1 : nearest;
    const int hi = lo + 1;
    const double p = (a64 - mags[lo]) / (mags[hi] - mags[lo]);
    return (double)u < p ? hi : lo;
}

// maxima[i / row] = max over the block of |x|'s bits (maxima zeroed before).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
mf_block_max(const float* __restrict__ x, long long n, long long row, u32* __restrict__ maxima) {
    for (i64 i = (i64)blockIdx.x * LP_THREADS + threadIdx.x; i < n; i += (i64)gridDim.x * LP_THREADS)
        atomicMax(maxima + i / row, lp_abs_bits(x[i]));
}

// fp8: scale = amax / max_normal (1 for amax 0, the smallest float32 where it underflows to 0), each
// code of x / scale; a NaN of x / scale (a block holding NaN or Inf) takes nan_code, with x's sign
// where rounding to nearest (torch's cast keeps it), without where stochastic (the reference's).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
fp8_encode(const float* __restrict__ x, long long n, long long row, const u32* __restrict__ maxima,
           float max_normal, int mbits, int bias, int max_code, int nan_code, int stochastic, u32 key,
           const double* __restrict__ mags, float* __restrict__ scales, u8* __restrict__ codes) {
    for (i64 i = (i64)blockIdx.x * LP_THREADS + threadIdx.x; i < n; i += (i64)gridDim.x * LP_THREADS) {
        const i64 b = i / row;
        const float amax = __uint_as_float(maxima[b]);
        float scale = amax / max_normal;
        if (amax == 0.0f) scale = 1.0f;
        else if (scale == 0.0f) scale = __uint_as_float(1u);
        if (i == b * row) scales[b] = scale;
        const u32 bits = __float_as_uint(x[i] / scale);
        const u32 a = bits & 0x7FFFFFFFu;
        const u32 sign = (bits >> 24) & 0x80u;
        int code;
        if (a > 0x7F800000u) {
            code = stochastic ? nan_code : (nan_code | (int)sign);
        } else if (stochastic) {
            const float top = __uint_as_float(a) < max_normal ? __uint_as_float(a) : max_normal;
            code = mf_stochastic(top, mf_rne_code(__float_as_uint(top), mbits, bias, max_code),
                                 lp_uniform(key, (u32)i), mags) | (int)sign;
        } else {
            code = mf_rne_code(a, mbits, bias, max_code) | (int)sign;
        }
        codes[i] = (u8)code;
    }
}

// out[i] (+)= values[code] * the block's scale.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
fp8_decode(const u8* __restrict__ codes, const float* __restrict__ scales, const float* __restrict__ values,
           long long n, long long row, int add, float* __restrict__ out) {
    for (i64 i = (i64)blockIdx.x * LP_THREADS + threadIdx.x; i < n; i += (i64)gridDim.x * LP_THREADS) {
        const float v = values[codes[i]] * scales[i / row];
        out[i] = add ? out[i] + v : v;
    }
}

// mx: each block's E8M0 byte s + 127, s = floor(log2 amax) - emax clamped to +-127 (0xFF for a block
// holding NaN or Inf), and the float32 2**-s its entries are multiplied by (NaN for 0xFF).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
mx_scales(const u32* __restrict__ maxima, long long nb, int emax, u8* __restrict__ scales, float* __restrict__ v_scales) {
    for (i64 b = (i64)blockIdx.x * LP_THREADS + threadIdx.x; b < nb; b += (i64)gridDim.x * LP_THREADS) {
        const u32 bits = maxima[b];
        if (bits >= 0x7F800000u) {
            scales[b] = 0xFFu;
            v_scales[b] = __uint_as_float(0x7FC00000u);
            continue;
        }
        int s = -127;
        if (bits != 0u) {
            const int e = (int)(bits >> 23);
            const int log2 = e > 0 ? e - 127 : (31 - __clz((int)bits)) - 149;  // a subnormal: its top bit
            s = log2 - emax;
            s = s < -127 ? -127 : (s > 127 ? 127 : s);
        }
        scales[b] = (u8)(s + 127);
        // 2**-s: a normal float32 down to 2**-126, the subnormal 2**-127 below
        v_scales[b] = -s >= -126 ? __uint_as_float((u32)(127 - s) << 23) : __uint_as_float(1u << 22);
    }
}

// Each entry's code of x * 2**-s (a byte each; 0 in a NaN-scaled block): floats to the nearest even
// (or stochastically), int8 as two's complement of x * 2**-s * 64 rounded in float64, clamped to +-127.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
mx_codes(const float* __restrict__ x, long long n, const float* __restrict__ v_scales, int bits, int is_int,
         int mbits, int bias, int max_code, int stochastic, u32 key, const double* __restrict__ mags,
         u8* __restrict__ codes) {
    for (i64 i = (i64)blockIdx.x * LP_THREADS + threadIdx.x; i < n; i += (i64)gridDim.x * LP_THREADS) {
        const float scale = v_scales[i >> 5];
        int code;
        if (is_int) {
            double q = (double)x[i] * (double)scale * 64.0;
            if (stochastic) {
                const double low = floor(q);
                q = low + ((double)lp_uniform(key, (u32)i) < q - low ? 1.0 : 0.0);
            } else {
                q = rint(q);
            }
            q = q < -127.0 ? -127.0 : (q > 127.0 ? 127.0 : q);
            code = scale != scale ? 0 : ((int)q & 0xFF);
        } else {
            const u32 v = __float_as_uint(x[i] * scale);
            u32 a = v & 0x7FFFFFFFu;
            // A product that underflows to 0 (|x| at most 2**(s - 150)): the reference's exact product is
            // positive and rounds up on a draw of 0, as any positive float does.
            if (stochastic && a == 0u && x[i] != 0.0f) a = 1u;
            if (a > 0x7F800000u) {
                code = 0;
            } else {
                code = mf_rne_code(a, mbits, bias, max_code);
                if (stochastic) {
                    const float top = (float)mags[max_code];
                    const float m = __uint_as_float(a) < top ? __uint_as_float(a) : top;
                    code = mf_stochastic(m, mf_rne_code(__float_as_uint(m), mbits, bias, max_code),
                                         lp_uniform(key, (u32)i), mags);
                }
                code |= (int)(v >> 31) << (bits - 1);
            }
        }
        codes[i] = (u8)code;
    }
}

// Little-endian packing of 6- or 4-bit codes: a thread per four codes (three bytes) or per two (one).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
mx_pack(const u8* __restrict__ codes, long long n, int bits, u8* __restrict__ packed) {
    const i64 per = bits == 4 ? 2 : 4;
    const i64 units = (n + per - 1) / per;
    const i64 nbytes = (n * bits + 7) / 8;
    for (i64 u = (i64)blockIdx.x * LP_THREADS + threadIdx.x; u < units; u += (i64)gridDim.x * LP_THREADS) {
        u32 word = 0;
        for (i64 t = 0; t < per; ++t)
            if (u * per + t < n) word |= (u32)codes[u * per + t] << (bits * t);
        const i64 first = u * (per * bits / 8);
        for (i64 k = 0; k < per * bits / 8; ++k)
            if (first + k < nbytes) packed[first + k] = (u8)(word >> (8 * k));
    }
}

// out[i] (+)= values[code] * the block's 2**s (scale_values: per E8M0 byte, NaN for 0xFF).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
mx_decode(const u8* __restrict__ packed, const u8* __restrict__ scales, const float* __restrict__ values,
          const float* __restrict__ scale_values, long long n, int bits, int add, float* __restrict__ out) {
    for (i64 i = (i64)blockIdx.x * LP_THREADS + threadIdx.x; i < n; i += (i64)gridDim.x * LP_THREADS) {
        const i64 at = i * bits;
        u32 word = packed[at >> 3];
        if ((at & 7) + bits > 8) word |= (u32)packed[(at >> 3) + 1] << 8;
        const u32 code = (word >> (at & 7)) & ((1u << bits) - 1u);
        const float v = values[code] * scale_values[scales[i >> 5]];
        out[i] = add ? out[i] + v : v;
    }
}
