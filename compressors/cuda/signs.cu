// signsgd, efsignsgd, scaledsign (compressors/codecs/signs.py, kernels/signs.py): one float32 scale per
// tensor, one bit per entry (1 for x >= 0), eight to a byte, little-endian.
//
// The l1/l2 scales are compressors.core.pairwise's fixed-order float64 tree over the whole tensor
// padded with zeros to a power of two. signs_bits cuts it into aligned subtrees of SPAN = 4096
// leaves: one block per subtree (grid-stride), each thread the 16-leaf subtree of its 16 entries
// summed in registers, lp_block_tree adding the 256 of them; the subtree's sum goes to
// partials[j]. signs_scale (one block) adds the partials as the tree's upper levels, each thread
// an aligned run of them. A tensor below SPAN is one subtree padded further with zeros: its
// root plus +0.0, the same bits (every node is >= +0 or NaN). The sign bits are written in the same
// pass (two bytes a thread): x is read once. signsgd's max |sign| goes as a flag per subtree
// (0, 1 nonzero, 2 Inf, 3 NaN) through the same arrays.

#define SG_SIGN_MAX 0
#define SG_L1_MEAN 1
#define SG_L2_RMS 2
#define SG_PER_THREAD 16
#define SG_SPAN (LP_THREADS * SG_PER_THREAD)

__device__ __forceinline__ double sg_leaf(float v, int kind) {
    const double d = (double)v;
    return kind == SG_L1_MEAN ? fabs(d) : d * d;
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
signs_bits(const float* __restrict__ x, long long n, int kind, int vec, double* __restrict__ partials,
           u8* __restrict__ packed) {
    const i64 spans = (n + SG_SPAN - 1) / SG_SPAN;
    for (i64 j = blockIdx.x; j < spans; j += gridDim.x) {
        const i64 i = j * SG_SPAN + (i64)threadIdx.x * SG_PER_THREAD;
        const int count = i >= n ? 0 : (int)min((i64)SG_PER_THREAD, n - i);
        float v[SG_PER_THREAD];
        if (vec && count == SG_PER_THREAD) {
            const float4* x4 = reinterpret_cast<const float4*>(x + i);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float4 a = x4[q];
                v[4 * q] = a.x; v[4 * q + 1] = a.y; v[4 * q + 2] = a.z; v[4 * q + 3] = a.w;
            }
        } else {
#pragma unroll
            for (int t = 0; t < SG_PER_THREAD; ++t) v[t] = t < count ? x[i + t] : 0.0f;
        }
        u32 bits = 0;
#pragma unroll
        for (int t = 0; t < SG_PER_THREAD; ++t) bits |= (v[t] >= 0.0f ? 1u : 0u) << t;
        if (count == SG_PER_THREAD) {
            packed[i / 8] = (u8)bits;
            packed[i / 8 + 1] = (u8)(bits >> 8);
        } else if (count > 0) {
            bits &= (1u << count) - 1;
            packed[i / 8] = (u8)bits;
            if (count > 8) packed[i / 8 + 1] = (u8)(bits >> 8);
        }
        if (kind == SG_SIGN_MAX) {
            u32 flag = 0;
#pragma unroll
            for (int t = 0; t < SG_PER_THREAD; ++t) {
                const u32 f = isnan(v[t]) ? 3u : (isinf(v[t]) ? 2u : (v[t] != 0.0f ? 1u : 0u));
                flag = f > flag ? f : flag;
            }
            flag = lp_block_max(flag);
            if (threadIdx.x == 0) partials[j] = (double)flag;
        } else {
            double s[SG_PER_THREAD];  // leaves past n are the tree's zero padding
#pragma unroll
            for (int t = 0; t < SG_PER_THREAD; ++t) s[t] = t < count ? sg_leaf(v[t], kind) : 0.0;
#pragma unroll
            for (int d = 1; d < SG_PER_THREAD; d <<= 1)
#pragma unroll
                for (int t = 0; t < SG_PER_THREAD; t += 2 * d) s[t] = s[t] + s[t + d];
            const double total = lp_block_tree(s[0]);
            if (threadIdx.x == 0) partials[j] = total;
        }
    }
}

// One block: the tree over the `spans` partials (padded with zeros to a power of two), then the scale.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
signs_scale(const double* __restrict__ partials, long long spans, long long n, int kind, float* __restrict__ scale) {
    if (n == 0) {
        if (threadIdx.x == 0) scale[0] = 0.0f;
        return;
    }
    if (kind == SG_SIGN_MAX) {
        u32 flag = 0;
        for (i64 j = threadIdx.x; j < spans; j += LP_THREADS) {
            const u32 f = (u32)partials[j];
            flag = f > flag ? f : flag;
        }
        flag = lp_block_max(flag);
        if (threadIdx.x == 0)
            scale[0] = flag == 3 ? __uint_as_float(0x7FC00000u)
                     : flag == 2 ? __uint_as_float(0x7F800000u) : (flag ? 1.0f : 0.0f);
        return;
    }
    const i64 size = lp_pow2_ceil(spans);
    const i64 run = size > LP_THREADS ? size / LP_THREADS : 1;  // each thread an aligned subtree of run partials
    const i64 first = (i64)threadIdx.x * run;
    LpTree tree;
    lp_tree_init(tree);
    i64 pushed = 0;
    for (i64 j = first; j < first + run && j < spans; ++j, ++pushed) lp_tree_push(tree, partials[j], 0);
    const double sum = lp_block_tree(lp_tree_total(tree, pushed, run));
    if (threadIdx.x == 0)
        scale[0] = kind == SG_L1_MEAN ? (float)(sum / (double)n) : (float)(sqrt(sum) / sqrt((double)n));
}

// out[i] (+)= +scale where bit i is 1, -scale where 0; sixteen entries a thread (four float4 where vec).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
signs_decode(const float* __restrict__ scale, const u8* __restrict__ packed, long long n, int add, int vec,
             float* __restrict__ out) {
    const float plus = scale[0], minus = -scale[0];
    const i64 units = (n + SG_PER_THREAD - 1) / SG_PER_THREAD;
    for (i64 u = (i64)blockIdx.x * LP_THREADS + threadIdx.x; u < units; u += (i64)gridDim.x * LP_THREADS) {
        const i64 i = u * SG_PER_THREAD;
        const int count = (int)min((i64)SG_PER_THREAD, n - i);
        const u32 bits = (u32)packed[2 * u] | (count > 8 ? (u32)packed[2 * u + 1] << 8 : 0u);
        float v[SG_PER_THREAD];
#pragma unroll
        for (int t = 0; t < SG_PER_THREAD; ++t) v[t] = (bits >> t) & 1u ? plus : minus;
        lp_store8(out + i, v, count < 8 ? count : 8, add, vec);
        if (count > 8) lp_store8(out + i + 8, v + 8, count - 8, add, vec);
    }
}
