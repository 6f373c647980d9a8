// What every method's kernels share (compressors/cuda/build.py puts this file before each
// <method>.cu): integer types, the launch's block size, the counter hash, the fixed-order sum.
//
// No #include: NVRTC (CuPy's compiler) has no C++ standard headers. Every kernel runs with
// LP_THREADS threads per block; warp functions are called by all 32 lanes of a warp.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define LP_THREADS 256
#define LP_WARPS (LP_THREADS / 32)
#define LP_FULL 0xffffffffu

// compressors.core.rng's counter hash: fmix32(index * GOLDEN ^ key).
__device__ __forceinline__ u32 lp_hash(u32 key, u32 index) {
    u32 x = index * 0x9E3779B1u;
    x ^= key;
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

// compressors.core.rng.uniform of one element: lp_hash >> 8, times 2**-24.
__device__ __forceinline__ float lp_uniform(u32 key, u32 index) {
    return (float)(lp_hash(key, index) >> 8) * 5.9604644775390625e-08f;  // 2**-24: exact
}

// |x|'s bits: an integer max over them is torch.amax(|x|), a NaN (whose bits exceed inf's) winning.
__device__ __forceinline__ u32 lp_abs_bits(float x) { return __float_as_uint(x) & 0x7FFFFFFFu; }

// The power of two at or above n (1 for n <= 1).
__device__ __forceinline__ i64 lp_pow2_ceil(i64 n) {
    i64 size = 1;
    while (size < n) size <<= 1;
    return size;
}

// ---------------------------------------------------------------- the fixed-order sum
// compressors.core.pairwise defines it: a pairwise tree over a row padded with zeros to a power of
// two, left + right at every node, in float64. Any evaluation that adds the same nodes gives the
// same bits, so a kernel may cut the tree into aligned subtrees (a warp's 32 leaves, a thread's
// run, a block's span), sum each one, then add the subtrees' sums as the tree's upper levels.

// One thread's stack of partial sums (a binary counter): node k sums 2**levels[k] leaves in order.
struct LpTree {
    double sums[40];
    int levels[40];
    int depth;
};

__device__ __forceinline__ void lp_tree_init(LpTree& t) { t.depth = 0; }

// Push a node summing 2**level leaves (the next ones in order).
__device__ __forceinline__ void lp_tree_push(LpTree& t, double value, int level) {
    while (t.depth > 0 && t.levels[t.depth - 1] == level) {
        t.depth -= 1;
        value = t.sums[t.depth] + value;
        level += 1;
    }
    t.sums[t.depth] = value;
    t.levels[t.depth] = level;
    t.depth += 1;
}

// The sum of a subtree of `size` leaves (a power of two) of which `count` were pushed: the rest
// are zeros, pushed as whole zero subtrees (their sum is +0.0, as the reference's additions give).
__device__ __forceinline__ double lp_tree_total(LpTree& t, i64 count, i64 size) {
    if (count == 0) return 0.0;
    i64 position = count;
    while (position < size) {
        int level = 0;
        while (((position >> level) & 1) == 0) level += 1;
        lp_tree_push(t, 0.0, level);
        position += (i64)1 << level;
    }
    return t.sums[0];
}

// The tree sum over the 32 lanes of a warp, lane i holding leaf i (or the i-th of 32 equal
// aligned subtrees); lane 0 gets it. Stride d: a lane at a multiple of 2d adds its right neighbour
// subtree of d leaves.
__device__ __forceinline__ double lp_warp_tree(double v) {
    const int lane = threadIdx.x & 31;
    for (int d = 1; d < 32; d <<= 1) {
        const double right = __shfl_down_sync(LP_FULL, v, d);
        if ((lane & (2 * d - 1)) == 0) v = v + right;
    }
    return v;
}

// The tree sum over the block's LP_THREADS threads, thread i holding leaf i (or the i-th of equal
// aligned subtrees), returned to every thread. Called by every thread of the block.
__device__ __forceinline__ double lp_block_tree(double v) {
    __shared__ double warp_sums[LP_WARPS];
    __shared__ double total;
    v = lp_warp_tree(v);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        double w = threadIdx.x < LP_WARPS ? warp_sums[threadIdx.x] : 0.0;
        for (int d = 1; d < LP_WARPS; d <<= 1) {
            const double right = __shfl_down_sync(LP_FULL, w, d);
            if ((threadIdx.x & (2 * d - 1)) == 0) w = w + right;
        }
        if (threadIdx.x == 0) total = w;
    }
    __syncthreads();
    const double result = total;
    __syncthreads();  // a second call may overwrite total
    return result;
}

// The largest u32 over the block, returned to every thread (absmax over lp_abs_bits).
__device__ __forceinline__ u32 lp_block_max(u32 v) {
    __shared__ u32 warp_max[LP_WARPS];
    for (int d = 16; d >= 1; d >>= 1) {
        const u32 o = __shfl_xor_sync(LP_FULL, v, d);
        v = o > v ? o : v;
    }
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = v;
    __syncthreads();
    u32 m = 0;
    for (int w = 0; w < LP_WARPS; ++w) m = warp_max[w] > m ? warp_max[w] : m;
    __syncthreads();
    return m;
}

// ---------------------------------------------------------------- what several programs share

// Write (add: add, in float32) the first `count` (<= 8) of v into out: two 16-byte stores where all
// 8 are there and out is 16-byte aligned (aligned16), else one by one.
__device__ __forceinline__ void lp_store8(float* __restrict__ out, const float v[8], int count, int add,
                                          int aligned16) {
    if (count == 8 && aligned16) {
        float4* o = reinterpret_cast<float4*>(out);
        float4 a = make_float4(v[0], v[1], v[2], v[3]);
        float4 b = make_float4(v[4], v[5], v[6], v[7]);
        if (add) {
            const float4 p = o[0], q = o[1];
            a = make_float4(p.x + a.x, p.y + a.y, p.z + a.z, p.w + a.w);
            b = make_float4(q.x + b.x, q.y + b.y, q.z + b.z, q.w + b.w);
        }
        o[0] = a;
        o[1] = b;
    } else {
#pragma unroll
        for (int t = 0; t < 8; ++t)
            if (t < count) out[t] = add ? out[t] + v[t] : v[t];
    }
}

// Store the staged bytes stage[o - w0] for the packed bytes o in [lo, hi): whole aligned u32 words
// where they lie inside, single bytes at the ends (w0: lo rounded down to a word's address).
// Called by every thread after the stage is written and synced.
__device__ __forceinline__ void lp_store_stage(u8* __restrict__ packed, const u8* stage, i64 lo, i64 hi, i64 w0) {
    for (i64 o = w0 + 4 * (i64)threadIdx.x; o < hi; o += 4 * LP_THREADS) {
        const u8* s = stage + (o - w0);
        if (o >= lo && o + 4 <= hi) {
            *reinterpret_cast<u32*>(packed + o) =
                (u32)s[0] | ((u32)s[1] << 8) | ((u32)s[2] << 16) | ((u32)s[3] << 24);
        } else {
            for (int j = 0; j < 4; ++j)
                if (o + j >= lo && o + j < hi) packed[o + j] = s[j];
        }
    }
}

struct LpAdd {
    __device__ static __forceinline__ double apply(double l, double r) { return l + r; }
};
struct LpMax {
    __device__ static __forceinline__ u32 apply(u32 l, u32 r) { return l > r ? l : r; }
};

// Reduce a tile's segments of 2**logq slots (thread t holds slots 8t..8t+7 in a; LP_THREADS x 8
// slots): segment j's result into out[j]. Op is applied as the tree's left-right nodes (LpAdd: the
// fixed-order tree over the segment's slots). Called by every thread; out is read after a
// __syncthreads.
template <class T, class Op>
__device__ __forceinline__ void lp_tile_segments(T a[8], int logq, T* out) {
    __shared__ T warp_part[LP_WARPS];
    const int t = threadIdx.x, lane = t & 31;
    const int q = 1 << logq;
#pragma unroll
    for (int d = 1; d < 8; d <<= 1) {
        if (d < q) {
#pragma unroll
            for (int j = 0; j < 8; j += 2 * d) a[j] = Op::apply(a[j], a[j + d]);
        }
    }
    if (q <= 8) {  // uniform: each segment lies in one thread
#pragma unroll
        for (int j = 0; j < 8; ++j)
            if ((j & (q - 1)) == 0) out[(8 * t + j) >> logq] = a[j];
        return;
    }
    const int m = q >> 3;  // threads per segment
    T v = a[0];
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const T right = __shfl_down_sync(LP_FULL, v, d);
        if (d < m && (lane & (2 * d - 1)) == 0) v = Op::apply(v, right);
    }
    if (m <= 32) {
        if ((t & (m - 1)) == 0) out[(8 * t) >> logq] = v;
        return;
    }
    const int mw = m >> 5;  // warps per segment: 2, 4 or 8
    if (lane == 0) warp_part[t >> 5] = v;
    __syncthreads();
    if (lane == 0 && ((t >> 5) & (mw - 1)) == 0) {
        T w[LP_WARPS];
#pragma unroll
        for (int j = 0; j < LP_WARPS; ++j) w[j] = warp_part[j];
        const int w0 = t >> 5;
#pragma unroll
        for (int d = 1; d < LP_WARPS; d <<= 1) {
            if (d < mw) {
#pragma unroll
                for (int j = 0; j + d < LP_WARPS; j += 2 * d) w[j] = Op::apply(w[j], w[j + d]);
            }
        }
        // w[w0] after the levels above is the segment's (its mw warps are an aligned run)
        T r = w[0];
#pragma unroll
        for (int j = 0; j < LP_WARPS; ++j)
            if (j == w0) r = w[j];
        out[(8 * t) >> logq] = r;
    }
    __syncthreads();  // warp_part may be written again by a next call
}
