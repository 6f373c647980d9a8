// Random-k (compressors/codecs/randomk.py): the k entries with the largest counter-hash draws u_i, ties by
// ascending index (kernels/randomk.py's _chosen), their values in ascending index order.
//
// u_i = h_i * 2**-24 with h_i a 24-bit integer, so ranking h ranks u. A radix select on h: a
// histogram of its top 12 bits finds the bin of the k-th largest; a histogram of the low 12 bits
// of that bin's entries finds the threshold tau; `above` entries have h > tau (all taken) and
// `room` = k - above of the ties h == tau are taken, the lowest indices first. Then, per tile of
// RANDOMK_TILE indices, the counts of entries above and of ties, an exclusive scan of them over the
// tiles, and the tiles again: each index knows whether it is chosen and its rank (its place among
// the values). No index is stored: encode gathers x, decode writes every entry.

#define RANDOMK_BINS 4096
#define RANDOMK_TILE 8192  // indices a block ranks at a time: 32 rounds of LP_THREADS

// h_i: the draw's 24 bits (lp_uniform is h * 2**-24, exact).
__device__ __forceinline__ u32 randomk_h(u32 key, i64 i) {
    return (u32)(lp_uniform(key, (u32)i) * 16777216.0f);
}

__device__ __forceinline__ u32 randomk_key(u32 key, int from_body, const u32* __restrict__ keyp) {
    return from_body ? keyp[0] : key;
}

// Histograms of h >> 12 (stage 0), or of h & 4095 over the entries whose h >> 12 is state[0]
// (stage 1), added into hist (zeroed): per block in shared memory, then the non-zero bins.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
randomk_histogram(u32 key, int from_body, const u32* __restrict__ keyp, long long n, int stage,
                  const long long* __restrict__ state, u32* __restrict__ hist) {
    __shared__ u32 local[RANDOMK_BINS];
    key = randomk_key(key, from_body, keyp);
    for (int b = threadIdx.x; b < RANDOMK_BINS; b += LP_THREADS) local[b] = 0;
    __syncthreads();
    const u32 bin = stage ? (u32)state[0] : 0u;
    for (i64 i = blockIdx.x * (i64)LP_THREADS + threadIdx.x; i < n; i += (i64)gridDim.x * LP_THREADS) {
        const u32 h = randomk_h(key, i);
        if (!stage) atomicAdd(&local[h >> 12], 1u);
        else if ((h >> 12) == bin) atomicAdd(&local[h & 4095u], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < RANDOMK_BINS; b += LP_THREADS)
        if (local[b]) atomicAdd(&hist[b], local[b]);
}

// One block: the bin (from the top) where the count of entries at or above reaches `wanted`.
// Stage 0 (wanted = k): state[0] = the top-12-bit bin, state[1] = entries in higher bins.
// Stage 1 (wanted = k - state[1]): state[2] = tau, state[3] = above, state[4] = room.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
randomk_find(const u32* __restrict__ hist, long long k, int stage, long long* __restrict__ state) {
    __shared__ i64 sums[LP_THREADS];
    const int t = threadIdx.x;
    const i64 wanted = stage ? k - state[1] : k;
    // Thread t: bins 4095 - 16t down to 4080 - 16t (the top first), so that thread order is descending.
    i64 mine = 0;
    for (int j = 0; j < 16; ++j) mine += hist[RANDOMK_BINS - 1 - (16 * t + j)];
    sums[t] = mine;
    __syncthreads();
    // Inclusive scan over the threads (Hillis-Steele through shared memory).
    for (int d = 1; d < LP_THREADS; d <<= 1) {
        const i64 add = t >= d ? sums[t - d] : 0;
        __syncthreads();
        sums[t] += add;
        __syncthreads();
    }
    const i64 before = sums[t] - mine;  // entries in the bins above this thread's
    if (before < wanted && wanted <= sums[t]) {
        i64 above = before;
        for (int j = 0; j < 16; ++j) {
            const int b = RANDOMK_BINS - 1 - (16 * t + j);
            if (above + hist[b] >= wanted) {
                if (!stage) {
                    state[0] = b;
                    state[1] = above;
                } else {
                    const i64 total = state[1] + above;
                    state[2] = (state[0] << 12) | b;
                    state[3] = total;
                    state[4] = k - total;
                }
                break;
            }
            above += hist[b];
        }
    }
}

// Per tile: counts[2 * tile] = entries with h > tau, counts[2 * tile + 1] = ties (h == tau).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
randomk_count(u32 key, int from_body, const u32* __restrict__ keyp, long long n,
              const long long* __restrict__ state, u32* __restrict__ counts) {
    __shared__ u32 totals[2];
    key = randomk_key(key, from_body, keyp);
    const u32 tau = (u32)state[2];
    const i64 tiles = (n + RANDOMK_TILE - 1) / RANDOMK_TILE;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        if (threadIdx.x == 0) totals[0] = totals[1] = 0;
        __syncthreads();
        u32 above = 0, ties = 0;
        const i64 end = min((tile + 1) * RANDOMK_TILE, n);
        for (i64 i = tile * RANDOMK_TILE + threadIdx.x; i < end; i += LP_THREADS) {
            const u32 h = randomk_h(key, i);
            above += h > tau;
            ties += h == tau;
        }
        // per warp, then one shared atomic a warp
        for (int d = 16; d >= 1; d >>= 1) {
            above += __shfl_xor_sync(LP_FULL, above, d);
            ties += __shfl_xor_sync(LP_FULL, ties, d);
        }
        if ((threadIdx.x & 31) == 0) {
            atomicAdd(&totals[0], above);
            atomicAdd(&totals[1], ties);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            counts[2 * tile] = totals[0];
            counts[2 * tile + 1] = totals[1];
        }
        __syncthreads();
    }
}

// One block: offsets[2 * tile + s] = the sum of counts[2 * t + s] over the tiles t before (s = 0, 1).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
randomk_scan(const u32* __restrict__ counts, long long tiles, long long* __restrict__ offsets) {
    __shared__ i64 part[2][LP_THREADS];
    __shared__ i64 carry[2];
    const int t = threadIdx.x;
    if (t < 2) carry[t] = 0;
    __syncthreads();
    for (i64 base = 0; base < tiles; base += LP_THREADS) {
        const i64 tile = base + t;
        const i64 a = tile < tiles ? counts[2 * tile] : 0, b = tile < tiles ? counts[2 * tile + 1] : 0;
        part[0][t] = a;
        part[1][t] = b;
        __syncthreads();
        for (int d = 1; d < LP_THREADS; d <<= 1) {
            const i64 pa = t >= d ? part[0][t - d] : 0, pb = t >= d ? part[1][t - d] : 0;
            __syncthreads();
            part[0][t] += pa;
            part[1][t] += pb;
            __syncthreads();
        }
        if (tile < tiles) {
            offsets[2 * tile] = carry[0] + part[0][t] - a;
            offsets[2 * tile + 1] = carry[1] + part[1][t] - b;
        }
        __syncthreads();
        if (t == 0) {
            carry[0] += part[0][LP_THREADS - 1];
            carry[1] += part[1][LP_THREADS - 1];
        }
        __syncthreads();
    }
}

// The ranks: for each index of the tile, in order, whether it is chosen and its place among the
// values. mode 0 (encode): values[place] = x[i], and block 0 writes the key into keyp[0]; mode 1
// (decode): out[i] (+)= the value or +0.0. Warp w of a block takes the tile's w-th run of 1024
// indices (32 rounds of 32 lanes, coalesced), keeps their draws in registers, counts its entries
// above tau and ties, and after one exchange of those counts between the warps ranks its run round
// by round with ballots (no block barrier in the rounds).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
randomk_place(u32 key, int from_body, u32* __restrict__ keyp, long long n, const long long* __restrict__ state,
              const long long* __restrict__ offsets, int mode, const float* __restrict__ x,
              float* __restrict__ values, float* __restrict__ out, int add) {
    __shared__ u32 warp_above[LP_WARPS], warp_ties[LP_WARPS];
    key = randomk_key(key, from_body, keyp);
    const int t = threadIdx.x, lane = t & 31, w = t >> 5;
    const u32 below = (1u << lane) - 1u;
    const u32 tau = (u32)state[2];
    const i64 room = state[4];
    const i64 tiles = (n + RANDOMK_TILE - 1) / RANDOMK_TILE;
    constexpr int ROUNDS = RANDOMK_TILE / LP_THREADS;  // 32: a warp's run is ROUNDS x 32 indices
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 base = tile * RANDOMK_TILE + (i64)w * (ROUNDS * 32) + lane;
        u32 h[ROUNDS];
        u32 above = 0, ties = 0;
#pragma unroll
        for (int r = 0; r < ROUNDS; ++r) {
            const i64 i = base + 32 * r;
            h[r] = i < n ? randomk_h(key, i) : 0u;
            above += (i < n && h[r] > tau) ? 1u : 0u;
            ties += (i < n && h[r] == tau) ? 1u : 0u;
        }
        for (int d = 16; d >= 1; d >>= 1) {
            above += __shfl_xor_sync(LP_FULL, above, d);
            ties += __shfl_xor_sync(LP_FULL, ties, d);
        }
        if (lane == 0) {
            warp_above[w] = above;
            warp_ties[w] = ties;
        }
        __syncthreads();
        i64 ties_before = offsets[2 * tile + 1];
        i64 above_before = offsets[2 * tile];
        for (int j = 0; j < w; ++j) {
            ties_before += warp_ties[j];
            above_before += warp_above[j];
        }
        __syncthreads();  // the counts are written again for the next tile
        i64 place = above_before + min(ties_before, room);  // the chosen entries before the run
#pragma unroll
        for (int r = 0; r < ROUNDS; ++r) {
            const i64 i = base + 32 * r;
            u32 chosen_bits = __ballot_sync(LP_FULL, i < n && h[r] > tau);
            if (ties) {  // the warp's own count: uniform over its lanes
                const u32 tie_bits = __ballot_sync(LP_FULL, i < n && h[r] == tau);
                // the lowest-index ties while there is room
                i64 left = room - ties_before;
                u32 rest = tie_bits;
                while (left > 0 && rest) {
                    const u32 low = rest & (~rest + 1u);
                    chosen_bits |= low;
                    rest ^= low;
                    left -= 1;
                }
                ties_before += __popc(tie_bits);
            }
            const bool chosen = (chosen_bits >> lane) & 1u;
            const i64 rank = place + __popc(chosen_bits & below);
            if (mode == 0) {
                if (chosen) values[rank] = x[i];
            } else if (i < n) {
                const float v = chosen ? values[rank] : 0.0f;
                out[i] = add ? out[i] + v : v;
            }
            place += __popc(chosen_bits);
        }
    }
    if (mode == 0 && blockIdx.x == 0 && t == 0) keyp[0] = key;
}
