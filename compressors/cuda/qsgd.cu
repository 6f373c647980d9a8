// QSGD (compressors/codecs/qsgd.py, terngrad.py): per bucket a norm (absmax or the l2 norm as the
// fixed-order float64 tree), then each entry's code, sign << (bits-1) | level, the level rounded
// stochastically with lp_uniform(key, index). Codes are packed `bits` bits each, LSB first: 8 codes
// fill `bits` bytes, so the groups of 8 (aligned to the tensor's start) are byte-aligned whatever
// the buckets are. Byte for byte compressors/kernels/qsgd.py.
//
// Buckets of up to QSGD_TILE entries (the default 512): one block per tile of whole buckets reads
// the tile once into shared memory, reduces each bucket (an aligned 2**logq-slot segment of the
// tile) and codes the groups of 8 that lie in the tile; a group straddling two tiles (or the
// tensor's last, short one) is coded by qsgd_encode_edges afterwards, from the norms.
// Longer buckets: aligned 2048-leaf subtrees per block (qsgd_partials), summed up to the bucket's
// norm (qsgd_reduce), then the codes (qsgd_encode_big): the tensor is read twice.

#define QSGD_TILE 2048  // slots per tile: LP_THREADS threads x 8

// One entry's code, as kernels/qsgd.py's _encode_one (float32 steps in its order).
__device__ __forceinline__ u32 qsgd_code(float v, float norm, float s, u32 key, u32 index, u32 sign) {
    // Divide (not multiply by s / norm): s / norm overflows for denormal norms.
    float r = fabsf(v) / norm * s;
    if (isnan(r)) r = 0.0f;
    r = r < 0.0f ? 0.0f : r;
    r = r < s ? r : s;
    const float fl = floorf(r);
    float level = fl + (lp_uniform(key, index) < r - fl ? 1.0f : 0.0f);
    level = level < s ? level : s;
    return (u32)level | (v < 0.0f ? sign : 0u);
}

__device__ __forceinline__ i64 qsgd_word_start(i64 lo, int pk_align) { return lo - ((lo + pk_align) & 3); }

// Buckets of `bucket` <= QSGD_TILE entries (2**logq the power of two at or above it; the tensor's
// last bucket may be shorter): tile i holds buckets i*per .. i*per+per-1, per = QSGD_TILE >> logq.
// 4 blocks an SM (64 registers, no spills): the loads of some overlap the others' reductions.
extern "C" __global__ __launch_bounds__(LP_THREADS, 4) void
qsgd_encode_tiles(const float* __restrict__ x, long long n, long long bucket, int logq, int bits, int l2,
                  u32 key, float* __restrict__ norms, u8* __restrict__ packed, int pk_align, int x_al16) {
    __shared__ float4 xs4[QSGD_TILE / 4];
    float* xs = reinterpret_cast<float*>(xs4);
    union Seg {
        double sum[QSGD_TILE];
        u32 max[QSGD_TILE];
    };
    __shared__ Seg seg;
    __shared__ float nsh[QSGD_TILE];
    __shared__ u8 stage[QSGD_TILE + 8];
    const int t = threadIdx.x;
    const int per = QSGD_TILE >> logq;
    const i64 nb = (n + bucket - 1) / bucket;
    const i64 tiles = (nb + per - 1) / per;
    const float s = (float)((1 << (bits - 1)) - 1);
    const u32 sign = 1u << (bits - 1);
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 b0 = tile * per;
        const i64 A = b0 * bucket;
        const i64 B = min(A + per * bucket, n);
        const int len = (int)(B - A);
        // The tile's entries, read once (coalesced; 16 bytes a thread where aligned).
        if (x_al16 && (A & 3) == 0) {
            const float4* x4 = reinterpret_cast<const float4*>(x + A);
            for (int j = t; j < (len >> 2); j += LP_THREADS) xs4[j] = x4[j];
            for (int j = (len & ~3) + t; j < len; j += LP_THREADS) xs[j] = x[A + j];
        } else {
            for (int j = t; j < len; j += LP_THREADS) xs[j] = x[A + j];
        }
        __syncthreads();
        // Slot 8t + j is entry (slot >> logq) * bucket + (slot & (q - 1)) of the tile, or padding.
        const int q = 1 << logq;
        if (l2) {
            double a[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int slot = 8 * t + j, leaf = slot & (q - 1);
                const i64 e = (i64)(slot >> logq) * bucket + leaf;
                double v = 0.0;
                if (leaf < bucket && e < len) {
                    v = (double)xs[e];
                    v = v * v;  // float64: squares of large float32 values overflow float32
                }
                a[j] = v;
            }
            lp_tile_segments<double, LpAdd>(a, logq, seg.sum);
        } else {
            u32 a[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int slot = 8 * t + j, leaf = slot & (q - 1);
                const i64 e = (i64)(slot >> logq) * bucket + leaf;
                a[j] = (leaf < bucket && e < len) ? lp_abs_bits(xs[e]) : 0u;
            }
            lp_tile_segments<u32, LpMax>(a, logq, seg.max);
        }
        __syncthreads();
        for (int j = t; j < per; j += LP_THREADS) {
            const float norm = l2 ? (float)sqrt(seg.sum[j]) : __uint_as_float(seg.max[j]);
            nsh[j] = norm;
            if (b0 + j < nb) norms[b0 + j] = norm;
        }
        __syncthreads();
        // The groups of 8 inside [A, B); the ones across A or B are qsgd_encode_edges'.
        const i64 gA = (A + 7) >> 3, gB = B >> 3;
        if (gB > gA) {
            const i64 lo = gA * bits, hi = gB * bits;
            const i64 w0 = qsgd_word_start(lo, pk_align);
            const i64 g = gA + t;
            if (g < gB) {
                u64 word = 0;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int e = (int)(8 * g + j - A);
                    const u32 code = qsgd_code(xs[e], nsh[e / (int)bucket], s, key, (u32)(8 * g + j), sign);
                    word |= (u64)code << (j * bits);
                }
                u8* dst = stage + (g * bits - w0);
                for (int k = 0; k < bits; ++k) dst[k] = (u8)(word >> (8 * k));
            }
            __syncthreads();
            lp_store_stage(packed, stage, lo, hi, w0);
        }
        __syncthreads();
    }
}

// The groups of 8 that straddle a tile boundary of qsgd_encode_tiles (tile i ends at
// min(i * per_tile, n)), and the tensor's last group when short: one thread each, from the norms.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
qsgd_encode_edges(const float* __restrict__ x, long long n, long long bucket, long long per_tile, long long tiles,
                  int bits, u32 key, const float* __restrict__ norms, u8* __restrict__ packed, long long packed_nbytes) {
    const float s = (float)((1 << (bits - 1)) - 1);
    const u32 sign = 1u << (bits - 1);
    for (i64 i = 1 + blockIdx.x * (i64)LP_THREADS + threadIdx.x; i <= tiles; i += (i64)gridDim.x * LP_THREADS) {
        const i64 end = min(i * per_tile, n);
        if ((end & 7) == 0) continue;
        const i64 g = end >> 3;
        u64 word = 0;
        for (int j = 0; j < 8 && 8 * g + j < n; ++j) {
            const i64 e = 8 * g + j;
            word |= (u64)qsgd_code(x[e], norms[e / bucket], s, key, (u32)e, sign) << (j * bits);
        }
        const i64 at = g * bits;
        const i64 count = min((i64)bits, packed_nbytes - at);
        for (int k = 0; k < count; ++k) packed[at + k] = (u8)(word >> (8 * k));
    }
}

// Long buckets, step 1: partial[b * per + c] = the reduction of leaves c*QSGD_TILE.. of bucket b
// (an aligned subtree of its tree; leaves past the bucket are +0.0, neutral for both reductions:
// squares and abs bits are >= +0). The absmax travels as its bits, a float64 integer.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
qsgd_partials(const float* __restrict__ x, long long n, long long bucket, long long per, int l2, int x_al16,
              double* __restrict__ partial) {
    const int t = threadIdx.x;
    const i64 nb = (n + bucket - 1) / bucket;
    for (i64 c = blockIdx.x; c < nb * per; c += gridDim.x) {
        const i64 b = c / per;
        const i64 lo = b * bucket + (c - b * per) * QSGD_TILE;
        const i64 hi = min(min(lo + QSGD_TILE, (b + 1) * bucket), n);
        const i64 e0 = lo + 8 * t;
        float v[8];
        if (x_al16 && (lo & 3) == 0 && e0 + 8 <= hi) {
            const float4 p = *reinterpret_cast<const float4*>(x + e0);
            const float4 r = *reinterpret_cast<const float4*>(x + e0 + 4);
            v[0] = p.x; v[1] = p.y; v[2] = p.z; v[3] = p.w;
            v[4] = r.x; v[5] = r.y; v[6] = r.z; v[7] = r.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = e0 + j < hi ? x[e0 + j] : 0.0f;
        }
        double result;
        if (l2) {
            double a[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const double d = (double)v[j];
                a[j] = d * d;
            }
            const double sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
            result = lp_block_tree(sum);
        } else {
            u32 m = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) m = max(m, lp_abs_bits(v[j]));
            result = (double)lp_block_max(m);
        }
        if (t == 0) partial[c] = result;
    }
}

// Long buckets, step 2: each row of `len` values (a bucket's partials) to ceil(len / QSGD_TILE)
// (aligned subtrees again, +0.0 past the row); with `last` (one value a row) the norms.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
qsgd_reduce(const double* __restrict__ in, long long rows, long long len, int l2, int last,
            double* __restrict__ out, float* __restrict__ norms) {
    const int t = threadIdx.x;
    const i64 per = (len + QSGD_TILE - 1) / QSGD_TILE;
    for (i64 c = blockIdx.x; c < rows * per; c += gridDim.x) {
        const i64 row = c / per;
        const i64 lo = (c - row * per) * QSGD_TILE + 8 * t;
        const double* r = in + row * len;
        double a[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) a[j] = lo + j < len ? r[lo + j] : 0.0;
        double result;
        if (l2) {
            const double sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
            result = lp_block_tree(sum);
        } else {
            double m = a[0];
#pragma unroll
            for (int j = 1; j < 8; ++j) m = a[j] > m ? a[j] : m;
            result = (double)lp_block_max((u32)m);
        }
        if (t == 0) {
            if (last) norms[row] = l2 ? (float)sqrt(result) : __uint_as_float((u32)result);
            else out[c] = result;
        }
    }
}

// Long buckets, step 3: the codes, a tile of QSGD_TILE entries (256 groups of 8) a block, the
// tensor's last group included (its bytes up to packed_nbytes).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
qsgd_encode_big(const float* __restrict__ x, long long n, long long bucket, int bits, u32 key,
                const float* __restrict__ norms, u8* __restrict__ packed, long long packed_nbytes,
                int pk_align, int x_al16) {
    __shared__ u8 stage[QSGD_TILE + 8];
    const int t = threadIdx.x;
    const float s = (float)((1 << (bits - 1)) - 1);
    const u32 sign = 1u << (bits - 1);
    const i64 tiles = (n + QSGD_TILE - 1) / QSGD_TILE;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 gA = tile * (QSGD_TILE / 8);
        const i64 lo = gA * bits, hi = min((gA + QSGD_TILE / 8) * bits, packed_nbytes);
        const i64 w0 = qsgd_word_start(lo, pk_align);
        const i64 g = gA + t;
        const i64 e0 = 8 * g;
        if (e0 < n) {
            float v[8];
            if (x_al16 && e0 + 8 <= n) {
                const float4 p = *reinterpret_cast<const float4*>(x + e0);
                const float4 r = *reinterpret_cast<const float4*>(x + e0 + 4);
                v[0] = p.x; v[1] = p.y; v[2] = p.z; v[3] = p.w;
                v[4] = r.x; v[5] = r.y; v[6] = r.z; v[7] = r.w;
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) v[j] = e0 + j < n ? x[e0 + j] : 0.0f;
            }
            // bucket > QSGD_TILE >= 8: the group lies in one or two buckets
            const i64 b = e0 / bucket;
            const i64 edge = (b + 1) * bucket;
            const float n0 = norms[b];
            const float n1 = edge < n ? norms[b + 1] : n0;
            u64 word = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                if (e0 + j < n) {
                    const u32 code = qsgd_code(v[j], e0 + j < edge ? n0 : n1, s, key, (u32)(e0 + j), sign);
                    word |= (u64)code << (j * bits);
                }
            }
            u8* dst = stage + (g * bits - w0);
            for (int k = 0; k < bits; ++k) dst[k] = (u8)(word >> (8 * k));
        }
        __syncthreads();
        lp_store_stage(packed, stage, lo, hi, w0);
        __syncthreads();
    }
}

// Decode: a tile of QSGD_TILE entries a block; its packed bytes staged through shared memory
// (coalesced byte loads: the body may lie at any offset), each thread one group of 8.
// value = +-level * (norm / s): the scale first, as the reference's norms / levels.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
qsgd_decode(const float* __restrict__ norms, const u8* __restrict__ packed, long long n, long long bucket,
            int bits, long long packed_nbytes, float* __restrict__ out, int add, int out_al16) {
    __shared__ u8 stage[QSGD_TILE + 8];
    const int t = threadIdx.x;
    const float s = (float)((1 << (bits - 1)) - 1);
    const u32 sign = 1u << (bits - 1);
    const u32 mask = (1u << bits) - 1;
    const i64 tiles = (n + QSGD_TILE - 1) / QSGD_TILE;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 lo = tile * (QSGD_TILE / 8) * bits;
        const int len = (int)min((i64)(QSGD_TILE / 8) * bits, packed_nbytes - lo);
        for (int j = t; j < len; j += LP_THREADS) stage[j] = packed[lo + j];
        __syncthreads();
        const i64 e0 = tile * QSGD_TILE + 8 * t;
        if (e0 < n) {
            u64 word = 0;
            for (int k = 0; k < bits; ++k)
                if (t * bits + k < len) word |= (u64)stage[t * bits + k] << (8 * k);
            const int count = (int)min((i64)8, n - e0);
            i64 b = e0 / bucket;
            i64 edge = (b + 1) * bucket;
            float scale = norms[b] / s;
            float v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                if (j < count) {
                    while (e0 + j >= edge) {  // buckets shorter than 8
                        b += 1;
                        edge += bucket;
                        scale = norms[b] / s;
                    }
                    const u32 code = (u32)(word >> (j * bits)) & mask;
                    const float level = (float)(code & (sign - 1));
                    v[j] = (code >= sign ? -level : level) * scale;
                }
            }
            lp_store8(out + e0, v, count, add, out_al16);
        }
        __syncthreads();
    }
}
