// dynamic8 and linear8 (compressors/codecs/scaled8.py, kernels/scaled8.py): one absolute maximum per
// bucket of `row` entries (block, or the whole tensor), then one code byte per entry.
//
// Encode, by the bucket's length (the glue picks):
//   groups:  row <= 1024: G lanes (a power of two up to 32) per bucket, 256 / G buckets a block;
//            the bucket's max by shuffles, then its codes, the second read from L1.
//   buckets: long rows and many buckets: one block per bucket, max then codes (second read L1/L2).
//   chunks:  long rows and few buckets (block 0: the whole tensor): chunks of CHUNK entries of a
//            bucket; a first launch takes each chunk's max (one atomicMax per chunk into a u32
//            scratch, over |x|'s bits), a second writes the codes.
// Every path reads float4 and writes 4 codes as one u32 where `vec` says x is 16-byte and the
// codes 4-byte aligned (the glue checks); the head and tail of a range go entry by entry.
// The codes are those of the Numba kernels: the same float32 division / multiplication, NaN
// and clamping rules, and dynamic8's bin table (kernels.scaled8._bin_table) read through __ldg.

struct S8Linear {
    __device__ __forceinline__ u32 operator()(float v, float m) const {
        float q = m > 0.0f ? rintf(v / m * 127.0f) : 0.0f;
        q = q != q ? 0.0f : fminf(fmaxf(q, -127.0f), 127.0f);
        return (u32)((int)q + 127);
    }
};

struct S8Dynamic {
    const u32* __restrict__ table;
    __device__ __forceinline__ u32 operator()(float v, float m) const {
        float a = m > 0.0f ? fabsf(v) / m : 0.0f;
        a = isnan(a) ? 0.0f : (a < 1.0f ? a : 1.0f);
        const u32 bits = __float_as_uint(a);
        const u32 e = __ldg(table + (bits >> 15));
        const u32 code = (bits & 0x7FFFu) < (e & 0xFFFFu) ? (e >> 16) & 0xFFu : e >> 24;
        return code | (v < 0.0f ? 0x80u : 0u);
    }
};

// The largest |x| bits over this lane's entries of [lo, hi): entries lo + lane, lo + lane + stride...
// (float4 units likewise where vec).
__device__ __forceinline__ u32 s8_lane_max(const float* __restrict__ x, i64 lo, i64 hi, int vec, int lane, int stride) {
    u32 m = 0;
    if (vec) {
        i64 a4 = (lo + 3) & ~(i64)3;
        if (a4 > hi) a4 = hi;
        i64 b4 = hi & ~(i64)3;
        if (b4 < a4) b4 = a4;
        for (i64 i = lo + lane; i < a4; i += stride) m = max(m, lp_abs_bits(x[i]));
        for (i64 i = b4 + lane; i < hi; i += stride) m = max(m, lp_abs_bits(x[i]));
        const float4* x4 = reinterpret_cast<const float4*>(x);
        for (i64 k = a4 / 4 + lane; k < b4 / 4; k += stride) {
            const float4 v = x4[k];
            m = max(m, max(max(lp_abs_bits(v.x), lp_abs_bits(v.y)), max(lp_abs_bits(v.z), lp_abs_bits(v.w))));
        }
    } else {
        for (i64 i = lo + lane; i < hi; i += stride) m = max(m, lp_abs_bits(x[i]));
    }
    return m;
}

// This lane's codes of [lo, hi) under the maximum m, the same split as s8_lane_max.
template <class Q>
__device__ __forceinline__ void s8_lane_codes(const float* __restrict__ x, u8* __restrict__ codes, i64 lo, i64 hi,
                                              float m, Q q, int vec, int lane, int stride) {
    if (vec) {
        i64 a4 = (lo + 3) & ~(i64)3;
        if (a4 > hi) a4 = hi;
        i64 b4 = hi & ~(i64)3;
        if (b4 < a4) b4 = a4;
        for (i64 i = lo + lane; i < a4; i += stride) codes[i] = (u8)q(x[i], m);
        for (i64 i = b4 + lane; i < hi; i += stride) codes[i] = (u8)q(x[i], m);
        const float4* x4 = reinterpret_cast<const float4*>(x);
        u32* c4 = reinterpret_cast<u32*>(codes);
        for (i64 k = a4 / 4 + lane; k < b4 / 4; k += stride) {
            const float4 v = x4[k];
            c4[k] = q(v.x, m) | (q(v.y, m) << 8) | (q(v.z, m) << 16) | (q(v.w, m) << 24);
        }
    } else {
        for (i64 i = lo + lane; i < hi; i += stride) codes[i] = (u8)q(x[i], m);
    }
}

// The bucket's maximum as the Numba kernel sets it: raised to floor where floor > max (a NaN
// floor or max changes nothing).
__device__ __forceinline__ float s8_floored(u32 bits, float floor) {
    const float m = __uint_as_float(bits);
    return floor > m ? floor : m;
}

template <class Q>
__device__ __forceinline__ void s8_encode_groups(const float* __restrict__ x, i64 n, i64 row, i64 nb, int group,
                                                 float floor, float* __restrict__ maxima, u8* __restrict__ codes,
                                                 Q q, int vec) {
    const int per_block = LP_THREADS / group;
    const int g = threadIdx.x & (group - 1);
    for (i64 base = (i64)blockIdx.x * per_block; base < nb; base += (i64)gridDim.x * per_block) {
        const i64 b = base + threadIdx.x / group;
        const bool live = b < nb;
        const i64 lo = live ? b * row : 0;
        const i64 hi = live ? min(lo + row, n) : 0;
        u32 m = s8_lane_max(x, lo, hi, vec, g, group);
        for (int d = group >> 1; d >= 1; d >>= 1) {  // within aligned groups of `group` lanes
            const u32 o = __shfl_xor_sync(LP_FULL, m, d);
            m = o > m ? o : m;
        }
        if (live) {
            const float mf = s8_floored(m, floor);
            if (g == 0) maxima[b] = mf;
            s8_lane_codes(x, codes, lo, hi, mf, q, vec, g, group);
        }
    }
}

template <class Q>
__device__ __forceinline__ void s8_encode_buckets(const float* __restrict__ x, i64 n, i64 row, i64 nb, float floor,
                                                  float* __restrict__ maxima, u8* __restrict__ codes, Q q, int vec) {
    for (i64 b = blockIdx.x; b < nb; b += gridDim.x) {
        const i64 lo = b * row, hi = min(lo + row, n);
        const u32 m = lp_block_max(s8_lane_max(x, lo, hi, vec, threadIdx.x, LP_THREADS));
        const float mf = s8_floored(m, floor);
        if (threadIdx.x == 0) maxima[b] = mf;
        s8_lane_codes(x, codes, lo, hi, mf, q, vec, threadIdx.x, LP_THREADS);
    }
}

// Chunk c is piece c % per_bucket of bucket c / per_bucket.
__device__ __forceinline__ void s8_chunk(i64 c, i64 n, i64 row, i64 chunk, i64 per_bucket, i64& b, i64& lo, i64& hi) {
    b = c / per_bucket;
    const i64 start = b * row;
    const i64 end = min(start + row, n);
    lo = start + (c - b * per_bucket) * chunk;
    hi = min(lo + chunk, end);
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
scaled8_chunk_max(const float* __restrict__ x, long long n, long long row, long long chunk, long long per_bucket,
                  long long chunks, int vec, u32* __restrict__ scratch) {
    for (i64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        i64 b, lo, hi;
        s8_chunk(c, n, row, chunk, per_bucket, b, lo, hi);
        const u32 m = lp_block_max(s8_lane_max(x, lo, hi, vec, threadIdx.x, LP_THREADS));
        if (threadIdx.x == 0) atomicMax(scratch + b, m);
    }
}

template <class Q>
__device__ __forceinline__ void s8_encode_chunks(const float* __restrict__ x, i64 n, i64 row, i64 chunk, i64 per_bucket,
                                                 i64 chunks, const u32* __restrict__ scratch, float floor,
                                                 float* __restrict__ maxima, u8* __restrict__ codes, Q q, int vec) {
    for (i64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        i64 b, lo, hi;
        s8_chunk(c, n, row, chunk, per_bucket, b, lo, hi);
        const float mf = s8_floored(scratch[b], floor);
        if (threadIdx.x == 0 && c == b * per_bucket) maxima[b] = mf;
        s8_lane_codes(x, codes, lo, hi, mf, q, vec, threadIdx.x, LP_THREADS);
    }
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
scaled8_linear8_encode_groups(const float* __restrict__ x, long long n, long long row, long long nb, int group,
                              float floor, float* __restrict__ maxima, u8* __restrict__ codes, int vec) {
    s8_encode_groups(x, n, row, nb, group, floor, maxima, codes, S8Linear(), vec);
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
scaled8_dynamic8_encode_groups(const float* __restrict__ x, long long n, long long row, long long nb, int group,
                               float floor, float* __restrict__ maxima, u8* __restrict__ codes, int vec,
                               const u32* __restrict__ table) {
    s8_encode_groups(x, n, row, nb, group, floor, maxima, codes, S8Dynamic{table}, vec);
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
scaled8_linear8_encode_buckets(const float* __restrict__ x, long long n, long long row, long long nb, float floor,
                               float* __restrict__ maxima, u8* __restrict__ codes, int vec) {
    s8_encode_buckets(x, n, row, nb, floor, maxima, codes, S8Linear(), vec);
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
scaled8_dynamic8_encode_buckets(const float* __restrict__ x, long long n, long long row, long long nb, float floor,
                                float* __restrict__ maxima, u8* __restrict__ codes, int vec,
                                const u32* __restrict__ table) {
    s8_encode_buckets(x, n, row, nb, floor, maxima, codes, S8Dynamic{table}, vec);
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
scaled8_linear8_encode_chunks(const float* __restrict__ x, long long n, long long row, long long chunk,
                              long long per_bucket, long long chunks, const u32* __restrict__ scratch, float floor,
                              float* __restrict__ maxima, u8* __restrict__ codes, int vec) {
    s8_encode_chunks(x, n, row, chunk, per_bucket, chunks, scratch, floor, maxima, codes, S8Linear(), vec);
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
scaled8_dynamic8_encode_chunks(const float* __restrict__ x, long long n, long long row, long long chunk,
                               long long per_bucket, long long chunks, const u32* __restrict__ scratch, float floor,
                               float* __restrict__ maxima, u8* __restrict__ codes, int vec,
                               const u32* __restrict__ table) {
    s8_encode_chunks(x, n, row, chunk, per_bucket, chunks, scratch, floor, maxima, codes, S8Dynamic{table}, vec);
}

// status[0] = 1 if `code` is among codes[0:n] (one atomic per block and round, only on a hit).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
scaled8_has_code(const u8* __restrict__ codes, long long n, int code, int* __restrict__ status) {
    const i64 stride = (i64)gridDim.x * LP_THREADS * 4;
    for (i64 base = (i64)blockIdx.x * LP_THREADS * 4; base < n; base += stride) {
        int hit = 0;
        const i64 i = base + 4 * (i64)threadIdx.x;
        for (int t = 0; t < 4; ++t) hit |= (i + t < n && codes[i + t] == (u8)code);
        if (__syncthreads_or(hit) && threadIdx.x == 0) atomicOr(status, 1);
    }
}

// out[i] (+)= values[codes[i]] * maxima[i / row] in float32, four entries a thread and round
// (one u32 of codes and one float4 of out where vec says both are aligned); the table in shared memory.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
scaled8_decode(const u8* __restrict__ codes, const float* __restrict__ maxima, const float* __restrict__ values,
               long long n, long long row, int add, int vec, float* __restrict__ out) {
    __shared__ float table[256];
    table[threadIdx.x] = values[threadIdx.x];
    __syncthreads();
    const i64 units = (n + 3) / 4;
    for (i64 u = (i64)blockIdx.x * LP_THREADS + threadIdx.x; u < units; u += (i64)gridDim.x * LP_THREADS) {
        const i64 i = 4 * u;
        i64 b = (u32)i / (u32)row;  // indices < 2**31 (wire.MAX_NUMEL): a 32-bit division
        i64 next = (b + 1) * row;
        float v[4];
        u32 c4 = 0;
        const int count = n - i < 4 ? (int)(n - i) : 4;
        if (vec && count == 4) {
            c4 = reinterpret_cast<const u32*>(codes)[u];
        } else {
            for (int t = 0; t < count; ++t) c4 |= (u32)codes[i + t] << (8 * t);
        }
        float m = maxima[b];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            if (t < count && i + t >= next) {
                b += 1;
                next += row;
                m = maxima[b];
            }
            v[t] = table[(c4 >> (8 * t)) & 0xFFu] * m;
        }
        if (vec && count == 4) {
            float4* o4 = reinterpret_cast<float4*>(out) + u;
            float4 o = make_float4(v[0], v[1], v[2], v[3]);
            if (add) {
                const float4 p = *o4;
                o = make_float4(p.x + v[0], p.y + v[1], p.z + v[2], p.w + v[3]);
            }
            *o4 = o;
        } else {
#pragma unroll
            for (int t = 0; t < 4; ++t)
                if (t < count) out[i + t] = add ? out[i + t] + v[t] : v[t];
        }
    }
}
