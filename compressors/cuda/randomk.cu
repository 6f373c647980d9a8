// Random-k (compressors/codecs/randomk.py): the first k of compressors/core/rng.py's keyed permutation of
// 0..n-1 (kernels/randomk.py's _indices), value j the entry at index j. A thread per index: no sort, no
// selection over n. Encode gathers x; decode clears out (or adds +0.0 to it) and writes the values.

#define RANDOMK_ROUNDS 4

// rng.permuted's j-th index: the Feistel network on 2 * half bits, walked until below n.
__device__ __forceinline__ i64 randomk_index(const u32* keys, int half, i64 n, u32 j) {
    const u32 mask = (1u << half) - 1u;
    u32 x = j;
    while (true) {
        u32 left = x >> half, right = x & mask;
#pragma unroll
        for (int r = 0; r < RANDOMK_ROUNDS; ++r) {
            const u32 next = left ^ (lp_hash(keys[r], right) & mask);
            left = right;
            right = next;
        }
        x = (left << half) | right;
        if ((i64)x < n) return (i64)x;
    }
}

// rng.round_keys: fmix32(key + (round + 1) * GOLDEN), the hash of index 0 under key + (round + 1) * GOLDEN.
__device__ __forceinline__ void randomk_keys(u32 key, u32* keys) {
#pragma unroll
    for (int r = 0; r < RANDOMK_ROUNDS; ++r) keys[r] = lp_hash(key + (u32)(r + 1) * 0x9E3779B1u, 0u);
}

// values[j] = x at the j-th index; the first thread writes the key into keyp[0].
extern "C" __global__ __launch_bounds__(LP_THREADS) void
randomk_encode(u32 key, long long n, long long k, int half, const float* __restrict__ x, u32* __restrict__ keyp,
               float* __restrict__ values) {
    u32 keys[RANDOMK_ROUNDS];
    randomk_keys(key, keys);
    for (i64 j = blockIdx.x * (i64)LP_THREADS + threadIdx.x; j < k; j += (i64)gridDim.x * LP_THREADS)
        values[j] = x[randomk_index(keys, half, n, (u32)j)];
    if (blockIdx.x == 0 && threadIdx.x == 0) keyp[0] = key;
}

// idx[j] = the j-th index under the body's key; with add, old[j] = out there (before randomk_clear).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
randomk_take(const u32* __restrict__ keyp, long long n, long long k, int half, const float* __restrict__ out,
             int add, i64* __restrict__ idx, float* __restrict__ old) {
    u32 keys[RANDOMK_ROUNDS];
    randomk_keys(keyp[0], keys);
    for (i64 j = blockIdx.x * (i64)LP_THREADS + threadIdx.x; j < k; j += (i64)gridDim.x * LP_THREADS) {
        const i64 i = randomk_index(keys, half, n, (u32)j);
        idx[j] = i;
        if (add) old[j] = out[i];
    }
}

// out = +0.0, or out + 0.0 with add (the reference's dense add turns a -0.0 into +0.0).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
randomk_clear(long long n, int add, float* __restrict__ out) {
    for (i64 i = blockIdx.x * (i64)LP_THREADS + threadIdx.x; i < n; i += (i64)gridDim.x * LP_THREADS)
        out[i] = add ? out[i] + 0.0f : 0.0f;
}

// out[idx[j]] = values[j], or old[j] + values[j] with add.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
randomk_put(long long k, const i64* __restrict__ idx, const float* __restrict__ old, const float* __restrict__ values,
            int add, float* __restrict__ out) {
    for (i64 j = blockIdx.x * (i64)LP_THREADS + threadIdx.x; j < k; j += (i64)gridDim.x * LP_THREADS)
        out[idx[j]] = add ? old[j] + values[j] : values[j];
}
