// maxmin (compressors/codecs/maxmin.py, kernels/maxmin.py): per bucket its float32 min and max (NaN for
// both where it holds a NaN, a zero as +0.0), then each entry's level floor((x - min) / unit + u)
// in float64, clamped to [0, 2**bits - 1], packed little-endian: eight levels fill `bits` bytes.
//
// Every thread works on units of eight entries (eight levels = `bits` whole bytes, so no two
// threads share a byte), two float4 loads where x is 16-byte aligned.
// Encode, by the bucket (the glue picks):
//   bucket a multiple of 8 (the default 1024): fused, a bucket's units are its own bytes:
//     groups:  bucket <= 1024: G lanes per bucket (min/max by shuffles, then the levels, the second
//              read from L1);
//     buckets: longer, and many of them: a block per bucket (second read from L1/L2);
//   else, or few long buckets: the min/max per bucket first (groups, buckets, or chunks of a
//   bucket combined by atomics on order-preserving keys), then `maxmin_pack` over all units.
// The level: floor(y) > 0 and min(floor(y), top) of the Numba kernel are, for y the float64
// (x - low) / unit + u, "y >= 1 ? (y >= top ? top : (int)y) : 0" (a NaN y is level 0).

#define MM_NAN 0x7FC00000u  // np.float32(np.nan)

struct MmRange {
    float lo, hi;
    int nan;
};

__device__ __forceinline__ void mm_add(MmRange& r, float v) {
    if (isnan(v)) {
        r.nan = 1;
    } else {
        r.lo = fminf(r.lo, v);
        r.hi = fmaxf(r.hi, v);
    }
}

__device__ __forceinline__ MmRange mm_empty() {
    MmRange r;
    r.lo = __uint_as_float(0x7F800000u);
    r.hi = __uint_as_float(0xFF800000u);
    r.nan = 0;
    return r;
}

// This lane's entries of [lo, hi): units lo/8 + lane, + stride, ... where `units` (lo a multiple
// of 8), else entries lo + lane, + stride, ...
__device__ __forceinline__ MmRange mm_lane_range(const float* __restrict__ x, i64 lo, i64 hi, int units, int vec,
                                                 int lane, int stride) {
    MmRange r = mm_empty();
    if (units) {
        for (i64 i = lo + 8 * (i64)lane; i < hi; i += 8 * (i64)stride) {
            if (vec && i + 8 <= hi) {
                const float4 a = *reinterpret_cast<const float4*>(x + i);
                const float4 b = *reinterpret_cast<const float4*>(x + i + 4);
                mm_add(r, a.x); mm_add(r, a.y); mm_add(r, a.z); mm_add(r, a.w);
                mm_add(r, b.x); mm_add(r, b.y); mm_add(r, b.z); mm_add(r, b.w);
            } else {
                const i64 end = min(i + 8, hi);
                for (i64 j = i; j < end; ++j) mm_add(r, x[j]);
            }
        }
    } else {
        for (i64 i = lo + lane; i < hi; i += stride) mm_add(r, x[i]);
    }
    return r;
}

// Combine the ranges of aligned groups of `group` lanes (a power of two up to 32) of a warp.
__device__ __forceinline__ MmRange mm_group_range(MmRange r, int group) {
    for (int d = group >> 1; d >= 1; d >>= 1) {
        const float lo = __shfl_xor_sync(LP_FULL, r.lo, d);
        const float hi = __shfl_xor_sync(LP_FULL, r.hi, d);
        const int nan = __shfl_xor_sync(LP_FULL, r.nan, d);
        r.lo = fminf(r.lo, lo);
        r.hi = fmaxf(r.hi, hi);
        r.nan |= nan;
    }
    return r;
}

// The block's range, to every thread.
__device__ __forceinline__ MmRange mm_block_range(MmRange r) {
    __shared__ float los[LP_WARPS], his[LP_WARPS];
    __shared__ int nans[LP_WARPS];
    r = mm_group_range(r, 32);
    if ((threadIdx.x & 31) == 0) {
        los[threadIdx.x >> 5] = r.lo;
        his[threadIdx.x >> 5] = r.hi;
        nans[threadIdx.x >> 5] = r.nan;
    }
    __syncthreads();
    r = mm_empty();
    for (int w = 0; w < LP_WARPS; ++w) {
        r.lo = fminf(r.lo, los[w]);
        r.hi = fmaxf(r.hi, his[w]);
        r.nan |= nans[w];
    }
    __syncthreads();
    return r;
}

// The bucket's min and max as sent.
__device__ __forceinline__ void mm_final(const MmRange& r, float& mn, float& mx) {
    mn = r.nan ? __uint_as_float(MM_NAN) : r.lo + 0.0f;
    mx = r.nan ? __uint_as_float(MM_NAN) : r.hi + 0.0f;
}

__device__ __forceinline__ u32 mm_level(float v, double low, double unit, u32 key, i64 i, int top) {
    const double y = ((double)v - low) / unit + (double)lp_uniform(key, (u32)i);
    return y >= 1.0 ? (y >= (double)top ? (u32)top : (u32)(int)y) : 0u;
}

// The levels of the `count` (<= 8) entries from i (a multiple of 8) of one bucket, packed.
__device__ __forceinline__ u64 mm_unit(const float* __restrict__ x, i64 i, int count, double low, double unit,
                                       u32 key, int bits, int vec) {
    if (!(unit > 0.0)) return 0;  // a constant bucket, or a NaN in it
    const int top = (1 << bits) - 1;
    float v[8];
    if (vec && count == 8) {
        const float4 a = *reinterpret_cast<const float4*>(x + i);
        const float4 b = *reinterpret_cast<const float4*>(x + i + 4);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
#pragma unroll
        for (int t = 0; t < 8; ++t) v[t] = t < count ? x[i + t] : 0.0f;
    }
    u64 word = 0;
#pragma unroll
    for (int t = 0; t < 8; ++t)
        if (t < count) word |= (u64)mm_level(v[t], low, unit, key, i + t, top) << (t * bits);
    return word;
}

// Unit u's `bits` bytes (fewer at the end of the stream: nbytes in all); whole words where aligned.
__device__ __forceinline__ void mm_store(u8* __restrict__ packed, i64 u, int bits, u64 word, i64 nbytes, int aligned) {
    const i64 at = u * bits;
    if (aligned && at + bits <= nbytes) {
        if (bits == 8) { *reinterpret_cast<u64*>(packed + at) = word; return; }
        if (bits == 4) { *reinterpret_cast<u32*>(packed + at) = (u32)word; return; }
        if (bits == 2) { *reinterpret_cast<unsigned short*>(packed + at) = (unsigned short)word; return; }
    }
    const i64 count = min((i64)bits, nbytes - at);
    for (int j = 0; j < count; ++j) packed[at + j] = (u8)(word >> (8 * j));
}

__device__ __forceinline__ double mm_unit_of(float mn, float mx, int bits) {
    return ((double)mx - (double)mn) / (double)((1 << bits) - 1);
}

// This lane's units of bucket [lo, hi) (lo a multiple of 8) under the bucket's min and max.
__device__ __forceinline__ void mm_lane_pack(const float* __restrict__ x, i64 lo, i64 hi, float mn, float mx, u32 key,
                                             int bits, u8* __restrict__ packed, i64 nbytes, int vec, int aligned,
                                             int lane, int stride) {
    const double low = (double)mn, unit = mm_unit_of(mn, mx, bits);
    for (i64 i = lo + 8 * (i64)lane; i < hi; i += 8 * (i64)stride) {
        const int count = (int)min((i64)8, hi - i);
        mm_store(packed, i / 8, bits, mm_unit(x, i, count, low, unit, key, bits, vec), nbytes, aligned);
    }
}

// ---------------------------------------------------------------- fused (bucket % 8 == 0)

extern "C" __global__ __launch_bounds__(LP_THREADS) void
maxmin_fused_groups(const float* __restrict__ x, long long n, u32 key, int bits, long long bucket, long long nb,
                    int group, float* __restrict__ mins, float* __restrict__ maxs, u8* __restrict__ packed,
                    long long nbytes, int vec, int aligned) {
    const int per_block = LP_THREADS / group;
    const int g = threadIdx.x & (group - 1);
    for (i64 base = (i64)blockIdx.x * per_block; base < nb; base += (i64)gridDim.x * per_block) {
        const i64 b = base + threadIdx.x / group;
        const bool live = b < nb;
        const i64 lo = live ? b * bucket : 0;
        const i64 hi = live ? min(lo + bucket, n) : 0;
        const MmRange r = mm_group_range(mm_lane_range(x, lo, hi, 1, vec, g, group), group);
        if (live) {
            float mn, mx;
            mm_final(r, mn, mx);
            if (g == 0) {
                mins[b] = mn;
                maxs[b] = mx;
            }
            mm_lane_pack(x, lo, hi, mn, mx, key, bits, packed, nbytes, vec, aligned, g, group);
        }
    }
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
maxmin_fused_buckets(const float* __restrict__ x, long long n, u32 key, int bits, long long bucket, long long nb,
                     float* __restrict__ mins, float* __restrict__ maxs, u8* __restrict__ packed, long long nbytes,
                     int vec, int aligned) {
    for (i64 b = blockIdx.x; b < nb; b += gridDim.x) {
        const i64 lo = b * bucket, hi = min(lo + bucket, n);
        const MmRange r = mm_block_range(mm_lane_range(x, lo, hi, 1, vec, threadIdx.x, LP_THREADS));
        float mn, mx;
        mm_final(r, mn, mx);
        if (threadIdx.x == 0) {
            mins[b] = mn;
            maxs[b] = mx;
        }
        mm_lane_pack(x, lo, hi, mn, mx, key, bits, packed, nbytes, vec, aligned, threadIdx.x, LP_THREADS);
    }
}

// ---------------------------------------------------------------- min/max first, then the levels

extern "C" __global__ __launch_bounds__(LP_THREADS) void
maxmin_range_groups(const float* __restrict__ x, long long n, long long bucket, long long nb, int group,
                    float* __restrict__ mins, float* __restrict__ maxs) {
    const int per_block = LP_THREADS / group;
    const int g = threadIdx.x & (group - 1);
    for (i64 base = (i64)blockIdx.x * per_block; base < nb; base += (i64)gridDim.x * per_block) {
        const i64 b = base + threadIdx.x / group;
        const bool live = b < nb;
        const i64 lo = live ? b * bucket : 0;
        const i64 hi = live ? min(lo + bucket, n) : 0;
        const MmRange r = mm_group_range(mm_lane_range(x, lo, hi, 0, 0, g, group), group);
        if (live && g == 0) mm_final(r, mins[b], maxs[b]);
    }
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
maxmin_range_buckets(const float* __restrict__ x, long long n, long long bucket, long long nb,
                     float* __restrict__ mins, float* __restrict__ maxs) {
    for (i64 b = blockIdx.x; b < nb; b += gridDim.x) {
        const i64 lo = b * bucket, hi = min(lo + bucket, n);
        const MmRange r = mm_block_range(mm_lane_range(x, lo, hi, 0, 0, threadIdx.x, LP_THREADS));
        if (threadIdx.x == 0) mm_final(r, mins[b], maxs[b]);
    }
}

// Order-preserving keys of non-NaN floats (-0 below +0: the +0.0 of mm_final makes them alike).
__device__ __forceinline__ u32 mm_key(float v) {
    const u32 u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float mm_unkey(u32 k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

// Chunk c (of `chunk` entries) of bucket c / per_bucket: its range into zeroed scratch, three
// u32 per bucket: ~key(min) and key(max) (atomicMax both), and a NaN flag.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
maxmin_range_chunks(const float* __restrict__ x, long long n, long long bucket, long long chunk, long long per_bucket,
                    long long chunks, int vec, u32* __restrict__ scratch) {
    for (i64 c = blockIdx.x; c < chunks; c += gridDim.x) {
        const i64 b = c / per_bucket;
        const i64 end = min(b * bucket + bucket, n);
        const i64 lo = b * bucket + (c - b * per_bucket) * chunk;
        const i64 hi = min(lo + chunk, end);
        // chunk is a multiple of 8: units where the bucket (so each chunk) starts on one
        const int units = (b * bucket) % 8 == 0;
        const MmRange r = mm_block_range(mm_lane_range(x, lo, hi, units, vec && units, threadIdx.x, LP_THREADS));
        if (threadIdx.x == 0) {
            if (r.nan) {
                atomicOr(scratch + 3 * b + 2, 1u);
            } else {
                atomicMax(scratch + 3 * b, ~mm_key(r.lo));
                atomicMax(scratch + 3 * b + 1, mm_key(r.hi));
            }
        }
    }
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
maxmin_range_finish(const u32* __restrict__ scratch, long long nb, float* __restrict__ mins, float* __restrict__ maxs) {
    for (i64 b = (i64)blockIdx.x * LP_THREADS + threadIdx.x; b < nb; b += (i64)gridDim.x * LP_THREADS) {
        MmRange r;
        r.nan = (int)scratch[3 * b + 2];
        r.lo = mm_unkey(~scratch[3 * b]);
        r.hi = mm_unkey(scratch[3 * b + 1]);
        mm_final(r, mins[b], maxs[b]);
    }
}

// The levels of every unit of eight entries, each entry under its bucket's min and max.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
maxmin_pack(const float* __restrict__ x, long long n, u32 key, int bits, long long bucket,
            const float* __restrict__ mins, const float* __restrict__ maxs, u8* __restrict__ packed,
            long long nbytes, int vec, int aligned) {
    const i64 units = (n + 7) / 8;
    const int top = (1 << bits) - 1;
    for (i64 u = (i64)blockIdx.x * LP_THREADS + threadIdx.x; u < units; u += (i64)gridDim.x * LP_THREADS) {
        const i64 i = 8 * u;
        const int count = (int)min((i64)8, n - i);
        i64 b = (u32)i / (u32)bucket;  // indices < 2**31 (wire.MAX_NUMEL): a 32-bit division
        i64 next = (b + 1) * bucket;
        if (next >= i + count) {  // one bucket
            const float mn = mins[b], mx = maxs[b];
            mm_store(packed, u, bits, mm_unit(x, i, count, (double)mn, mm_unit_of(mn, mx, bits), key, bits, vec),
                     nbytes, aligned);
            continue;
        }
        u64 word = 0;
        double low = (double)mins[b], unit = mm_unit_of(mins[b], maxs[b], bits);
        for (int t = 0; t < count; ++t) {
            if (i + t >= next) {
                b += 1;
                next += bucket;
                low = (double)mins[b];
                unit = mm_unit_of(mins[b], maxs[b], bits);
            }
            if (unit > 0.0) word |= (u64)mm_level(x[i + t], low, unit, key, i + t, top) << (t * bits);
        }
        mm_store(packed, u, bits, word, nbytes, aligned);
    }
}

// out[i] (+)= float32(min + unit * level) in float64, unit by unit; the packed bytes read one by one
// (a body may lie at any address).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
maxmin_decode(const float* __restrict__ mins, const float* __restrict__ maxs, const u8* __restrict__ packed,
              long long n, int bits, long long bucket, long long nbytes, int add, int vec, float* __restrict__ out) {
    const i64 units = (n + 7) / 8;
    const u64 mask = ((u64)1 << bits) - 1;
    for (i64 u = (i64)blockIdx.x * LP_THREADS + threadIdx.x; u < units; u += (i64)gridDim.x * LP_THREADS) {
        const i64 i = 8 * u;
        const int count = (int)min((i64)8, n - i);
        const i64 at = u * bits;
        const int have = (int)min((i64)bits, nbytes - at);
        u64 word = 0;
        for (int j = 0; j < have; ++j) word |= (u64)packed[at + j] << (8 * j);
        i64 b = (u32)i / (u32)bucket;  // indices < 2**31 (wire.MAX_NUMEL): a 32-bit division
        i64 next = (b + 1) * bucket;
        double low = (double)mins[b], unit = mm_unit_of(mins[b], maxs[b], bits);
        float v[8];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            if (t < count && i + t >= next) {
                b += 1;
                next += bucket;
                low = (double)mins[b];
                unit = mm_unit_of(mins[b], maxs[b], bits);
            }
            v[t] = (float)(low + unit * (double)((word >> (t * bits)) & mask));
        }
        lp_store8(out + i, v, count, add, vec);
    }
}
