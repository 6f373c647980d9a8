// Top-k and adaptive (compressors/codecs/topk.py, adaptive.py): exact selection by a radix select, adaptive's body
// (entries, group offsets, region means), LBANN's sampled selection, and the decoders. Byte for
// byte compressors/kernels/select.py.
//
// Exact selection of the k largest magnitude keys (select.magnitude_key: 31 bits, a NaN above
// inf, inf tied with the largest finite), ties at the k-th largest by ascending index:
//   sparse_select_hist (or sparse_transpose for adaptive's columns): one read of the input, a
//     histogram of the 12-bit top digit (key >> 19) per block in shared memory, merged by
//     atomics; the last block to finish finds the digit holding the k-th largest.
//   sparse_select_compact: the second and last read of the input, tile by tile (SP_TILE
//     elements): the keys at or above that digit (the survivors: those above it are all taken,
//     those in it are candidates) are compacted in ascending index order into the tile's own
//     segment of a scratch array (warp scans, no atomics), and the 12-bit middle digit of the
//     candidates is histogrammed; the last block finds that digit.
//   sparse_select_hist3, sparse_select_count, sparse_select_write: over the survivors alone
//     (about k plus the top digit's bin), the 7-bit low digit (the threshold T and how many
//     ties at it are taken), per tile the counts above and at T then their scans (last block),
//     and the selection written in order.
// Adaptive's sampled selection writes the entries sent tile by tile the same way.
//
// Scratch: ws, SP_WS zeroed u32 (histograms, last-block counters, the state a launch leaves the
// next); per tile a count and two scans; the segments (n indices, n words).

#define SP_TILE 4096  // elements per tile: 4 rounds of LP_THREADS threads x 4 (a 16-byte load each)
#define SP_INF 0x7F800000u
#define SP_D1_SHIFT 19
#define SP_D1_BINS 4096
#define SP_D2_SHIFT 7
#define SP_D2_BINS 4096
#define SP_D3_BINS 128

#define SP_WS_HIST1 0
#define SP_WS_HIST2 4096
#define SP_WS_HIST3 8192
#define SP_WS_DONE 8320   // last-block counters, one per kernel
#define SP_WS_STATE 8328  // what a kernel leaves the next ones
#define SP_WS 8344
#define SP_DONE_HIST1 0
#define SP_DONE_COMPACT 1
#define SP_DONE_HIST3 2
#define SP_DONE_COUNT 3
#define SP_DONE_SAMPLED 4
#define SP_ST_PREFIX1 0  // the top digit of the threshold
#define SP_ST_WANT1 1    // the rank of the threshold among the keys in that digit
#define SP_ST_PREFIX2 2  // key >> 7 of the threshold
#define SP_ST_WANT2 3
#define SP_ST_T 4        // the threshold key
#define SP_ST_ROOM 5     // how many keys equal to it are taken
#define SP_ST_TOTAL 6    // sampled: how many entries are sent (before the cap)
#define SP_ST_LOWPOS 7   // sampled: the thresholds' keys
#define SP_ST_LOWNEG 8

#define SP_SAMPLES 1024      // compressors.codecs.adaptive.THRESHOLD_SAMPLES
#define SP_MEAN_SAMPLES 128  // compressors.codecs.adaptive.MEAN_SAMPLES

// select.magnitude_key of float32 bits.
__device__ __forceinline__ u32 sparse_key(u32 w) {
    u32 key = w & 0x7FFFFFFFu;
    if (key >= SP_INF) key = key > SP_INF ? SP_INF : SP_INF - 1;
    return key;
}

__device__ __forceinline__ bool sparse_negative(u32 w) { return __uint_as_float(w) < 0.0f; }

// sparse._positions / select._position: a position in [0, bound) from the counter hash.
__device__ __forceinline__ i64 sparse_position(u32 key, u32 index, i64 bound) {
    const i64 h = (i64)(lp_uniform(key, index) * 16777216.0f);
    return (h * bound) >> 24;
}

// Exclusive prefix sum over the block (thread order) of v; *total gets the sum. Every thread.
__device__ __forceinline__ u32 sparse_block_scan(u32 v, u32* total) {
    __shared__ u32 warp_total[LP_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 s = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const u32 y = __shfl_up_sync(LP_FULL, s, d);
        if (lane >= d) s += y;
    }
    if (lane == 31) warp_total[warp] = s;
    __syncthreads();
    u32 before = 0, all = 0;
#pragma unroll
    for (int w = 0; w < LP_WARPS; ++w) {
        const u32 t = warp_total[w];
        if (w < warp) before += t;
        all += t;
    }
    __syncthreads();  // warp_total is reused by the next call
    *total = all;
    return before + s - v;
}

// Whether this block is the last of the launch to get here (every thread calls it, after its
// global writes); the last block then sees every other block's writes.
__device__ __forceinline__ bool sparse_last_block(u32* counter) {
    __shared__ u32 last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1 ? 1u : 0u;
    __syncthreads();
    const bool result = last != 0;
    if (result) __threadfence();
    return result;
}

// The digit d (of `bins`) holding the want-th largest key (want >= 1) by the histogram: the
// largest d with sum(hist[d:]) >= want. Writes (base << shift) | d and want - sum(hist[d+1:]).
// Every thread of the block calls it; the histogram is read past the cache (other blocks made it).
__device__ void sparse_find_digit(const u32* hist_, int bins, u32 want, u32 base, int shift, u32* digit,
                                  u32* rest) {
    const volatile u32* hist = hist_;
    const int per = (bins + LP_THREADS - 1) / LP_THREADS;
    const int chunk = LP_THREADS - 1 - (int)threadIdx.x;  // thread 0 holds the highest bins
    const int lo = min(chunk * per, bins), hi = min(lo + per, bins);
    u32 s = 0;
    for (int d = lo; d < hi; ++d) s += hist[d];
    u32 total;
    const u32 above = sparse_block_scan(s, &total);
    if (above < want && want - above <= s) {
        u32 acc = above;
        for (int d = hi - 1; d >= lo; --d) {
            const u32 h = hist[d];
            if (acc + h >= want) {
                *digit = (base << shift) | (u32)d;
                *rest = want - acc;
                break;
            }
            acc += h;
        }
    }
}

// Adds a block's shared histogram into the global one (its nonzero bins).
__device__ __forceinline__ void sparse_merge(const u32* local, u32* global, int bins) {
    __syncthreads();
    for (int d = threadIdx.x; d < bins; d += LP_THREADS)
        if (local[d]) atomicAdd(&global[d], local[d]);
}

__device__ __forceinline__ void sparse_clear(u32* local, int bins) {
    for (int d = threadIdx.x; d < bins; d += LP_THREADS) local[d] = 0;
    __syncthreads();
}

// Thread t's 16 words of the tile at base (limit: the elements left from base): round q holds
// elements q * 1024 + 4 t + e, e < 4 (16-byte loads where aligned and the tile is whole).
__device__ __forceinline__ void sparse_load_tile(const u32* __restrict__ x, i64 base, i64 limit, int aligned,
                                                 u32 (&w)[16]) {
    const int at = 4 * (int)threadIdx.x;
    if (aligned && limit >= SP_TILE) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const uint4 v = *reinterpret_cast<const uint4*>(x + base + q * 1024 + at);
            w[4 * q] = v.x;
            w[4 * q + 1] = v.y;
            w[4 * q + 2] = v.z;
            w[4 * q + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int local = q * 1024 + at + e;
                w[4 * q + e] = local < limit ? x[base + local] : 0u;
            }
    }
}

// Tile t's elements with keep(word, index) true, in ascending index order, into the tile's
// segment (seg_idx/seg_bits from t * SP_TILE); returns their count (to every thread). keep is
// called once per element of the tensor (it may count). Every thread of the block calls it.
template <class Keep>
__device__ __forceinline__ u32 sparse_compact_tile(const u32* __restrict__ x, i64 n, i64 t, int aligned,
                                                   u32* seg_idx, u32* seg_bits, Keep keep) {
    __shared__ u32 part[32];  // survivors per (round, warp), in index order
    const i64 base = t * SP_TILE, limit = n - base;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, at = 4 * (int)threadIdx.x;
    u32 w[16];
    sparse_load_tile(x, base, limit, aligned, w);
    u32 flags = 0, off[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        u32 c = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int local = q * 1024 + at + e;
            if (local < limit && keep(w[4 * q + e], base + local)) {
                flags |= 1u << (4 * q + e);
                c += 1;
            }
        }
        u32 s = c;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const u32 y = __shfl_up_sync(LP_FULL, s, d);
            if (lane >= d) s += y;
        }
        off[q] = s - c;
        if (lane == 31) part[8 * q + warp] = s;
    }
    __syncthreads();
    u32 run = 0, pre[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        if ((i & 7) == warp) pre[i >> 3] = run;
        run += part[i];
    }
    __syncthreads();  // part is reused by the next tile
    if (flags) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            u32 pos = pre[q] + off[q];
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (flags & (1u << (4 * q + e))) {
                    seg_idx[base + pos] = (u32)(base + q * 1024 + at + e);
                    seg_bits[base + pos] = w[4 * q + e];
                    pos += 1;
                }
        }
    }
    return run;
}

// ---------------------------------------------------------------- exact selection

// The top digit's histogram over the n words of x; the last block finds the threshold's digit.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_select_hist(const u32* __restrict__ x, i64 n,
                                                                            int aligned, i64 k, u32* ws) {
    __shared__ u32 hist[SP_D1_BINS];
    sparse_clear(hist, SP_D1_BINS);
    const i64 tiles = (n + SP_TILE - 1) / SP_TILE;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
        const i64 base = t * SP_TILE, limit = n - base;
        u32 w[16];
        sparse_load_tile(x, base, limit, aligned, w);
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (q * 1024 + 4 * (int)threadIdx.x + e < limit)
                    atomicAdd(&hist[sparse_key(w[4 * q + e]) >> SP_D1_SHIFT], 1u);
    }
    sparse_merge(hist, ws + SP_WS_HIST1, SP_D1_BINS);
    if (sparse_last_block(ws + SP_WS_DONE + SP_DONE_HIST1))
        sparse_find_digit(ws + SP_WS_HIST1, SP_D1_BINS, (u32)k, 0u, 0, ws + SP_WS_STATE + SP_ST_PREFIX1,
                          ws + SP_WS_STATE + SP_ST_WANT1);
}

// The groups' matrix of adaptive's columns: m (groups x length) = the transpose of x (length x
// groups), through 32 x 32 tiles in shared memory; with hist, the top digit's histogram of the
// keys as sparse_select_hist makes it (the order does not matter to it).
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_transpose(const u32* __restrict__ x, u32* m,
                                                                          i64 length, i64 groups, int hist_too,
                                                                          i64 k, u32* ws) {
    __shared__ u32 tile[32][33];
    __shared__ u32 hist[SP_D1_BINS];
    if (hist_too) sparse_clear(hist, SP_D1_BINS);
    const int lane = threadIdx.x & 31, row = threadIdx.x >> 5;
    const i64 tiles_p = (length + 31) / 32, tiles_g = (groups + 31) / 32;
    for (i64 tt = blockIdx.x; tt < tiles_p * tiles_g; tt += gridDim.x) {
        const i64 p0 = (tt / tiles_g) * 32, g0 = (tt % tiles_g) * 32;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const i64 p = p0 + row + 8 * s, g = g0 + lane;
            if (p < length && g < groups) {
                const u32 w = x[p * groups + g];
                tile[row + 8 * s][lane] = w;
                if (hist_too) atomicAdd(&hist[sparse_key(w) >> SP_D1_SHIFT], 1u);
            }
        }
        __syncthreads();
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const i64 g = g0 + row + 8 * s, p = p0 + lane;
            if (p < length && g < groups) m[g * length + p] = tile[lane][row + 8 * s];
        }
        __syncthreads();
    }
    if (!hist_too) return;  // uniform
    sparse_merge(hist, ws + SP_WS_HIST1, SP_D1_BINS);
    if (sparse_last_block(ws + SP_WS_DONE + SP_DONE_HIST1))
        sparse_find_digit(ws + SP_WS_HIST1, SP_D1_BINS, (u32)k, 0u, 0, ws + SP_WS_STATE + SP_ST_PREFIX1,
                          ws + SP_WS_STATE + SP_ST_WANT1);
}

// The survivors (keys in the threshold's top digit or above) into the tiles' segments; the
// middle digit's histogram of those in the top digit; the last block finds that digit.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_select_compact(const u32* __restrict__ x, i64 n,
                                                                               int aligned, u32* ws, u32* seg_idx,
                                                                               u32* seg_bits, u32* tile_count) {
    __shared__ u32 hist[SP_D2_BINS];
    sparse_clear(hist, SP_D2_BINS);
    const u32 b1 = ws[SP_WS_STATE + SP_ST_PREFIX1];
    const u32 edge = b1 << SP_D1_SHIFT;
    const i64 tiles = (n + SP_TILE - 1) / SP_TILE;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
        const u32 count = sparse_compact_tile(x, n, t, aligned, seg_idx, seg_bits, [&](u32 w, i64) {
            const u32 key = sparse_key(w);
            if ((key >> SP_D1_SHIFT) == b1) atomicAdd(&hist[(key >> SP_D2_SHIFT) & (SP_D2_BINS - 1)], 1u);
            return key >= edge;
        });
        if (threadIdx.x == 0) tile_count[t] = count;
    }
    sparse_merge(hist, ws + SP_WS_HIST2, SP_D2_BINS);
    if (sparse_last_block(ws + SP_WS_DONE + SP_DONE_COMPACT))
        sparse_find_digit(ws + SP_WS_HIST2, SP_D2_BINS, ws[SP_WS_STATE + SP_ST_WANT1], b1, 12,
                          ws + SP_WS_STATE + SP_ST_PREFIX2, ws + SP_WS_STATE + SP_ST_WANT2);
}

// The low digit's histogram of the survivors in the threshold's top and middle digits; the last
// block finds the threshold T and how many keys equal to it are taken.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_select_hist3(i64 n, u32* ws, const u32* seg_bits,
                                                                             const u32* tile_count) {
    __shared__ u32 hist[SP_D3_BINS];
    sparse_clear(hist, SP_D3_BINS);
    const u32 prefix = ws[SP_WS_STATE + SP_ST_PREFIX2];
    const i64 tiles = (n + SP_TILE - 1) / SP_TILE;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
        const u32 count = tile_count[t];
        for (u32 j = threadIdx.x; j < count; j += LP_THREADS) {
            const u32 key = sparse_key(seg_bits[t * SP_TILE + j]);
            if ((key >> SP_D2_SHIFT) == prefix) atomicAdd(&hist[key & (SP_D3_BINS - 1)], 1u);
        }
    }
    sparse_merge(hist, ws + SP_WS_HIST3, SP_D3_BINS);
    if (sparse_last_block(ws + SP_WS_DONE + SP_DONE_HIST3))
        sparse_find_digit(ws + SP_WS_HIST3, SP_D3_BINS, ws[SP_WS_STATE + SP_ST_WANT2], prefix, SP_D2_SHIFT,
                          ws + SP_WS_STATE + SP_ST_T, ws + SP_WS_STATE + SP_ST_ROOM);
}

// Per tile, its survivors above T (into offset) and equal to it (into ties); the last block turns
// them into each tile's first output slot (offset) and the ties before it (ties).
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_select_count(i64 n, u32* ws, const u32* seg_bits,
                                                                             const u32* tile_count, u32* offset,
                                                                             u32* ties) {
    const u32 T = ws[SP_WS_STATE + SP_ST_T];
    const i64 tiles = (n + SP_TILE - 1) / SP_TILE;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
        const u32 count = tile_count[t];
        u32 gt = 0, eq = 0;
        for (u32 j0 = 0; j0 < count; j0 += LP_THREADS) {
            const u32 j = j0 + threadIdx.x;
            const u32 key = j < count ? sparse_key(seg_bits[t * SP_TILE + j]) : 0u;
            gt += (u32)__syncthreads_count(j < count && key > T);
            eq += (u32)__syncthreads_count(j < count && key == T);
        }
        if (threadIdx.x == 0) {
            offset[t] = gt;
            ties[t] = eq;
        }
    }
    if (!sparse_last_block(ws + SP_WS_DONE + SP_DONE_COUNT)) return;
    volatile u32* vo = offset;
    volatile u32* vt = ties;
    const u32 room = ws[SP_WS_STATE + SP_ST_ROOM];
    const i64 per = (tiles + LP_THREADS - 1) / LP_THREADS;
    const i64 lo = min((i64)threadIdx.x * per, tiles), hi = min(lo + per, tiles);
    u32 s = 0, total;
    for (i64 t = lo; t < hi; ++t) s += vt[t];
    u32 eq_before = sparse_block_scan(s, &total);
    s = 0;
    for (i64 t = lo; t < hi; ++t) {
        const u32 eq = vt[t], gt = vo[t];
        const u32 take = room > eq_before ? min(room - eq_before, eq) : 0u;
        vt[t] = eq_before;
        vo[t] = gt + take;
        eq_before += eq;
        s += gt + take;
    }
    u32 at = sparse_block_scan(s, &total);
    for (i64 t = lo; t < hi; ++t) {
        const u32 c = vo[t];
        vo[t] = at;
        at += c;
    }
}

// The selection in ascending index order: out_bits[j] the word, out_idx[j] the index.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_select_write(i64 n, const u32* ws,
                                                                             const u32* seg_idx,
                                                                             const u32* seg_bits,
                                                                             const u32* tile_count,
                                                                             const u32* offset, const u32* ties,
                                                                             u32* out_bits, int* out_idx) {
    const u32 T = ws[SP_WS_STATE + SP_ST_T], room = ws[SP_WS_STATE + SP_ST_ROOM];
    const i64 tiles = (n + SP_TILE - 1) / SP_TILE;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
        const u32 count = tile_count[t], first = offset[t], ties_before = ties[t];
        const u32 ties_taken = room > ties_before ? room - ties_before : 0u;  // at most, in this tile
        u32 gt_run = 0, eq_run = 0;
        for (u32 j0 = 0; j0 < count; j0 += LP_THREADS) {
            const u32 j = j0 + threadIdx.x;
            const i64 at = t * SP_TILE + j;
            const u32 w = j < count ? seg_bits[at] : 0u;
            const u32 key = sparse_key(w);
            const bool gt = j < count && key > T, eq = j < count && key == T;
            u32 total;
            const u32 before = sparse_block_scan((gt ? 1u : 0u) | (eq ? 1u << 16 : 0u), &total);
            const u32 gt_before = gt_run + (before & 0xFFFFu), eq_before = eq_run + (before >> 16);
            if (gt || (eq && eq_before < ties_taken)) {
                const u32 pos = first + gt_before + min(eq_before, ties_taken);
                out_bits[pos] = w;
                out_idx[pos] = (int)seg_idx[at];
            }
            gt_run += total & 0xFFFFu;
            eq_run += total >> 16;
        }
    }
}

// ---------------------------------------------------------------- entries

// Entry j (little-endian, 4 bytes when wide else 2) as select._put writes it.
__device__ __forceinline__ void sparse_put(u8* entries, i64 j, int wide, u32 value) {
    const u64 address = (u64)(entries);
    if (wide) {
        if ((address & 3) == 0) {
            reinterpret_cast<u32*>(entries)[j] = value;
        } else {
            for (int b = 0; b < 4; ++b) entries[4 * j + b] = (u8)(value >> (8 * b));
        }
    } else if ((address & 1) == 0) {
        reinterpret_cast<unsigned short*>(entries)[j] = (unsigned short)value;
    } else {
        entries[2 * j] = (u8)value;
        entries[2 * j + 1] = (u8)(value >> 8);
    }
}

// Entry j as select._get reads it: a signed int32 when wide, else an uint16 (bytes: any address).
__device__ __forceinline__ i64 sparse_get(const u8* entries, i64 j, int wide) {
    if (wide) {
        const u32 v = (u32)entries[4 * j] | (u32)entries[4 * j + 1] << 8 | (u32)entries[4 * j + 2] << 16 |
                      (u32)entries[4 * j + 3] << 24;
        return (i64)(int)v;
    }
    return (i64)((u32)entries[2 * j] | (u32)entries[2 * j + 1] << 8);
}

// The first position in ascending a[0:count) whose value is >= value.
template <class T>
__device__ __forceinline__ i64 sparse_lower_bound(const T* a, i64 count, i64 value) {
    i64 lo = 0, hi = count;
    while (lo < hi) {
        const i64 mid = (lo + hi) >> 1;
        if ((i64)a[mid] < value) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// The group (row) holding entry j: the last r with offsets[r] <= j (-1: none), offsets as int32.
__device__ __forceinline__ i64 sparse_row_of(const u32* offsets, i64 rows, i64 j) {
    i64 lo = 0, hi = rows;
    while (lo < hi) {
        const i64 mid = (lo + hi) >> 1;
        if ((i64)(int)offsets[mid] <= j) lo = mid + 1; else hi = mid;
    }
    return lo - 1;
}

// ---------------------------------------------------------------- adaptive, exact

// The highest and lowest set bits' weights (log2) of a nonzero finite float32 magnitude a.
__device__ __forceinline__ void sparse_bit_range(u32 a, int& msb, int& lsb) {
    const u32 e = a >> 23;
    const u32 mant = e ? ((a & 0x007FFFFFu) | 0x00800000u) : (a & 0x007FFFFFu);
    const int s = e ? (int)e - 150 : -149;
    msb = s + 31 - __clz((int)mant);
    lsb = s + __ffs((int)mant) - 1;
}

// Whether count values (finite, one sign) with set bits from 2**lsb to 2**msb sum without any
// rounding in float64, in every order: every partial sum is a multiple of 2**lsb below
// count * 2**(msb + 1) <= 2**(lsb + 53), so it has at most 53 significant bits.
__device__ __forceinline__ bool sparse_sums_exactly(int count, int msb, int lsb) {
    if (count <= 1) return true;
    const int log_count = 32 - __clz(count - 1);  // ceil(log2(count))
    return log_count + msb + 1 <= lsb + 53;
}

__device__ __forceinline__ int sparse_warp_sum(int v) {
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) v += __shfl_xor_sync(LP_FULL, v, d);
    return v;
}
__device__ __forceinline__ int sparse_warp_max(int v) {
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) v = max(v, __shfl_xor_sync(LP_FULL, v, d));
    return v;
}
__device__ __forceinline__ int sparse_warp_min(int v) {
#pragma unroll
    for (int d = 16; d >= 1; d >>= 1) v = min(v, __shfl_xor_sync(LP_FULL, v, d));
    return v;
}

// The body of adaptive_encode from the selection (idx, bits: k ascending indices of the groups'
// matrix and their words): one warp per group finds its entries (binary search) and writes them.
// Each sign's values are summed in float64 in ascending index order (a chain of additions, as the
// kernel and the reference's index_add_ make them); where no partial sum can round (the values'
// bits span at most 53 - ceil(log2(count)) places: sparse_sums_exactly) every order gives those
// same bits, and the lanes sum in parallel; else one chain, all lanes alike.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_adaptive_exact(const int* idx, const u32* bits,
                                                                               i64 k, i64 rows, i64 cols,
                                                                               int wide, u32* head,
                                                                               u8* entries) {
    const int lane = threadIdx.x & 31;
    if (blockIdx.x == 0 && threadIdx.x == 0) head[0] = (u32)k;
    for (i64 r = (i64)blockIdx.x * LP_WARPS + (threadIdx.x >> 5); r < rows; r += (i64)gridDim.x * LP_WARPS) {
        const i64 start = sparse_lower_bound(idx, k, r * cols), end = sparse_lower_bound(idx, k, (r + 1) * cols);
        int count_pos = 0, count_neg = 0, msb_pos = -1000, msb_neg = -1000, lsb_pos = 1000, lsb_neg = 1000;
        int finite = 1;
        for (i64 j = start + lane; j < end; j += 32) {
            const u32 w = bits[j];
            const bool neg = sparse_negative(w);
            sparse_put(entries, j, wide, (u32)(((i64)idx[j] - r * cols) << 1) | (neg ? 1u : 0u));
            const u32 a = w & 0x7FFFFFFFu;
            int msb = -1000, lsb = 1000;
            if (a >= SP_INF) finite = 0;
            else if (a) sparse_bit_range(a, msb, lsb);
            if (neg) {
                count_neg += 1;
                msb_neg = max(msb_neg, msb);
                lsb_neg = min(lsb_neg, lsb);
            } else {
                count_pos += 1;
                msb_pos = max(msb_pos, msb);
                lsb_pos = min(lsb_pos, lsb);
            }
        }
        count_pos = sparse_warp_sum(count_pos);
        count_neg = sparse_warp_sum(count_neg);
        const bool exactly = sparse_warp_min(finite) &&
                             sparse_sums_exactly(count_pos, sparse_warp_max(msb_pos), sparse_warp_min(lsb_pos)) &&
                             sparse_sums_exactly(count_neg, sparse_warp_max(msb_neg), sparse_warp_min(lsb_neg));
        double sum_pos = 0.0, sum_neg = 0.0;
        if (exactly) {  // uniform
            for (i64 j = start + lane; j < end; j += 32) {
                const float v = __uint_as_float(bits[j]);
                if (v < 0.0f) sum_neg = sum_neg + (double)v;
                else sum_pos = sum_pos + (double)v;
            }
#pragma unroll
            for (int d = 16; d >= 1; d >>= 1) {
                sum_pos = sum_pos + __shfl_xor_sync(LP_FULL, sum_pos, d);
                sum_neg = sum_neg + __shfl_xor_sync(LP_FULL, sum_neg, d);
            }
        } else {
            for (i64 j0 = start; j0 < end; j0 += 32) {
                const u32 w = j0 + lane < end ? bits[j0 + lane] : 0u;
                const int count = (int)min(end - j0, (i64)32);
                for (int l = 0; l < count; ++l) {  // uniform: every lane sums alike
                    const float v = __uint_as_float(__shfl_sync(LP_FULL, w, l));
                    if (v < 0.0f) sum_neg = sum_neg + (double)v;
                    else sum_pos = sum_pos + (double)v;
                }
            }
        }
        if (lane == 0) {
            head[1 + r] = (u32)start;
            head[1 + rows + r] = __float_as_uint(count_pos > 0 ? (float)(sum_pos / (double)count_pos) : 0.0f);
            head[1 + 2 * rows + r] = __float_as_uint(count_neg > 0 ? (float)(sum_neg / (double)count_neg) : 0.0f);
        }
    }
}

// ---------------------------------------------------------------- adaptive, sampled

// LBANN's thresholds (adaptive_sampled_encode): the keys of SP_SAMPLES positions drawn by the
// counter hash (all of a shorter m), sorted (bitonic, in shared memory); of the keep largest, the
// smallest of each sign. One block.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_sampled_threshold(const u32* m, i64 n, u32 key,
                                                                                  i64 keep, u32* ws) {
    __shared__ int sorted[SP_SAMPLES];
    __shared__ u32 low[2];
    const i64 samples = min(n, (i64)SP_SAMPLES);
    u32 keys[4];
    bool negative[4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        const int j = (int)threadIdx.x + LP_THREADS * s;
        keys[s] = 0;
        negative[s] = false;
        if (j < samples) {
            const i64 i = n <= SP_SAMPLES ? (i64)j : sparse_position(key, (u32)j, n);
            const u32 w = m[i];
            keys[s] = sparse_key(w);
            negative[s] = sparse_negative(w);
            sorted[j] = (int)keys[s];
        } else {
            sorted[j] = -1;  // below every key: sorts first
        }
    }
    if (threadIdx.x == 0) low[0] = low[1] = SP_INF + 1;  // above every key
    __syncthreads();
    for (int size = 2; size <= SP_SAMPLES; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int p = threadIdx.x; p < SP_SAMPLES / 2; p += LP_THREADS) {
                const int i = 2 * p - (p & (stride - 1)), j = i + stride;
                const bool ascending = (i & size) == 0;
                const int a = sorted[i], b = sorted[j];
                if ((a > b) == ascending) {
                    sorted[i] = b;
                    sorted[j] = a;
                }
            }
            __syncthreads();
        }
    }
    const u32 top = (u32)sorted[SP_SAMPLES - keep];  // sorted(keys)[samples - keep]
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        const int j = (int)threadIdx.x + LP_THREADS * s;
        if (j < samples && keys[s] >= top) atomicMin(&low[negative[s] ? 1 : 0], keys[s]);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 low_pos = low[0], low_neg = low[1];
        if (low_pos == SP_INF + 1) low_pos = low_neg;
        if (low_neg == SP_INF + 1) low_neg = low_pos;
        ws[SP_WS_STATE + SP_ST_LOWPOS] = max(low_pos, 1u);
        ws[SP_WS_STATE + SP_ST_LOWNEG] = max(low_neg, 1u);
    }
}

// The entries sent (a key at or above its sign's threshold), tile by tile into the segments; per
// group, the non-finite ones sent (poison: the first NaN's position + 1, from the end, and flags
// for +inf, -inf). The last block scans the tiles' counts: each tile's first rank, the total.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_sampled_compact(const u32* __restrict__ m, i64 n,
                                                                                int aligned, i64 cols, u32* ws,
                                                                                u32* seg_idx, u32* seg_bits,
                                                                                u32* tile_count, u32* tile_first,
                                                                                u32* poison) {
    const u32 low_pos = ws[SP_WS_STATE + SP_ST_LOWPOS], low_neg = ws[SP_WS_STATE + SP_ST_LOWNEG];
    const i64 tiles = (n + SP_TILE - 1) / SP_TILE;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
        const u32 count = sparse_compact_tile(m, n, t, aligned, seg_idx, seg_bits, [&](u32 w, i64 i) {
            const bool neg = sparse_negative(w);
            const bool sent = sparse_key(w) >= (neg ? low_neg : low_pos);
            if (sent && (w & SP_INF) == SP_INF) {  // rare: a non-finite entry sent
                const i64 row = i / cols;
                if ((w & 0x007FFFFFu) != 0) atomicMax(&poison[3 * row], (u32)(n - i));  // NaN: first wins
                else atomicOr(&poison[3 * row + (neg ? 2 : 1)], 1u);
            }
            return sent;
        });
        if (threadIdx.x == 0) tile_count[t] = count;
    }
    if (!sparse_last_block(ws + SP_WS_DONE + SP_DONE_SAMPLED)) return;
    const volatile u32* counts = tile_count;
    const i64 per = (tiles + LP_THREADS - 1) / LP_THREADS;
    const i64 lo = min((i64)threadIdx.x * per, tiles), hi = min(lo + per, tiles);
    u32 s = 0, total;
    for (i64 t = lo; t < hi; ++t) s += counts[t];
    u32 at = sparse_block_scan(s, &total);
    for (i64 t = lo; t < hi; ++t) {
        tile_first[t] = at;
        at += counts[t];
    }
    if (threadIdx.x == 0) ws[SP_WS_STATE + SP_ST_TOTAL] = total;
}

// A lone child passes up unchanged, two present ones add left + right (select._sparse_tree_sum).
__device__ __forceinline__ void sparse_join(double& v, bool& p, double right, bool right_p) {
    if (p && right_p) {
        v = v + right;
    } else if (right_p) {
        v = right;
        p = true;
    }
}

// _sparse_tree_sum over a warp's 128 leaves, lane l holding leaves 4l..4l+3; lane 0 gets it.
__device__ __forceinline__ double sparse_warp_sparse_tree(const double (&v)[4], const bool (&p)[4]) {
    double a = v[0], b = v[2];
    bool pa = p[0], pb = p[2];
    sparse_join(a, pa, v[1], p[1]);
    sparse_join(b, pb, v[3], p[3]);
    sparse_join(a, pa, b, pb);
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const double right = __shfl_down_sync(LP_FULL, a, d);
        const int right_p = __shfl_down_sync(LP_FULL, pa ? 1 : 0, d);
        if ((lane & (2 * d - 1)) == 0) sparse_join(a, pa, right, right_p != 0);
    }
    return a;
}

// The rest of adaptive_sampled_encode's body: the entries sent up to the capacity (tiles), zero
// bytes after them, the total; per group (a warp each) its offset and its sides' means from
// its SP_MEAN_SAMPLES sample positions (the fixed-order sparse tree), plus the poison.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_sampled_finish(
    const u32* __restrict__ m, i64 n, u32 key, i64 rows, i64 cols, i64 capacity, int wide, const u32* ws,
    const u32* seg_idx, const u32* seg_bits, const u32* tile_count, const u32* tile_first, const u32* poison,
    u32* head, u8* entries) {
    const u32 low_pos = ws[SP_WS_STATE + SP_ST_LOWPOS], low_neg = ws[SP_WS_STATE + SP_ST_LOWNEG];
    const i64 total = min((i64)ws[SP_WS_STATE + SP_ST_TOTAL], capacity);
    const i64 tiles = (n + SP_TILE - 1) / SP_TILE;
    const int lane = threadIdx.x & 31;
    if (blockIdx.x == 0 && threadIdx.x == 0) head[0] = (u32)total;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
        const i64 first = tile_first[t];
        if (first >= capacity) continue;  // uniform
        const u32 count = tile_count[t];
        for (u32 j = threadIdx.x; j < count && first + j < capacity; j += LP_THREADS) {
            const i64 at = t * SP_TILE + j;
            const i64 i = seg_idx[at];
            const u32 neg = sparse_negative(seg_bits[at]) ? 1u : 0u;
            sparse_put(entries, first + j, wide, (u32)((i - (i / cols) * cols) << 1) | neg);
        }
    }
    const int width = wide ? 4 : 2;
    for (i64 b = total * width + (i64)blockIdx.x * LP_THREADS + threadIdx.x; b < capacity * width;
         b += (i64)gridDim.x * LP_THREADS)
        entries[b] = 0;
    const i64 per_group = min(cols, (i64)SP_MEAN_SAMPLES);
    const double fallback_pos = (double)__uint_as_float(low_pos), fallback_neg = -(double)__uint_as_float(low_neg);
    for (i64 r = (i64)blockIdx.x * LP_WARPS + (threadIdx.x >> 5); r < rows; r += (i64)gridDim.x * LP_WARPS) {
        double vp[4], vn[4];
        bool pp[4], pn[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const i64 s = 4 * lane + q;
            pp[q] = pn[q] = false;
            vp[q] = vn[q] = 0.0;
            if (s < per_group) {
                const i64 c = cols <= SP_MEAN_SAMPLES ? s
                              : sparse_position(key, (u32)(SP_SAMPLES + (u64)SP_MEAN_SAMPLES * (u64)r + (u64)s), cols);
                const u32 w = m[r * cols + c];
                const bool neg = sparse_negative(w);
                const bool taken = sparse_key(w) >= (neg ? low_neg : low_pos);
                pp[q] = taken && !neg;
                pn[q] = taken && neg;
                vp[q] = vn[q] = (double)__uint_as_float(w);
            }
        }
        int count_pos = 0, count_neg = 0;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            count_pos += __popc(__ballot_sync(LP_FULL, pp[q]));
            count_neg += __popc(__ballot_sync(LP_FULL, pn[q]));
        }
        const double tree_pos = sparse_warp_sparse_tree(vp, pp);
        const double tree_neg = sparse_warp_sparse_tree(vn, pn);
        if (lane == 0) {
            // The group's offset: the entries sent before its first element (segments are sorted).
            const i64 p = r * cols, t = p / SP_TILE;
            const i64 before = (i64)tile_first[t] + sparse_lower_bound(seg_idx + t * SP_TILE, (i64)tile_count[t], p);
            head[1 + r] = (u32)min(before, capacity);
            const u32 nan_from_end = poison[3 * r];
            const double poison_pos = nan_from_end ? (double)__uint_as_float(m[n - nan_from_end])
                                      : poison[3 * r + 1] ? (double)__uint_as_float(SP_INF) : 0.0;
            const double poison_neg = poison[3 * r + 2] ? -(double)__uint_as_float(SP_INF) : 0.0;
            const double mean_pos = count_pos > 0 ? tree_pos / (double)count_pos : fallback_pos;
            const double mean_neg = count_neg > 0 ? tree_neg / (double)count_neg : fallback_neg;
            head[1 + rows + r] = __float_as_uint((float)(mean_pos + poison_pos));
            head[1 + 2 * rows + r] = __float_as_uint((float)(mean_neg + poison_neg));
        }
    }
}

// ---------------------------------------------------------------- decoders, fills

// count words of value (16-byte stores where out is aligned).
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_fill(u32* out, i64 count, u32 value) {
    const i64 step = (i64)gridDim.x * LP_THREADS, first = (i64)blockIdx.x * LP_THREADS + threadIdx.x;
    i64 done = 0;
    if (((u64)out & 15) == 0) {
        const uint4 v = make_uint4(value, value, value, value);
        for (i64 i = first; i < count / 4; i += step) reinterpret_cast<uint4*>(out)[i] = v;
        done = count / 4 * 4;
    }
    for (i64 i = done + first; i < count; i += step) out[i] = value;
}

// topk_decode's checks: status |= 1 for an index outside [0, n), 2 for one not above the last.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_topk_check(const int* idx, i64 k, i64 n,
                                                                           u32* status) {
    u32 bad = 0;
    for (i64 j = (i64)blockIdx.x * LP_THREADS + threadIdx.x; j < k; j += (i64)gridDim.x * LP_THREADS) {
        const int i = idx[j];
        if (i < 0 || i >= n) bad |= 1u;
        if (j > 0 && i <= idx[j - 1]) bad |= 2u;
    }
    if (bad) atomicOr(status, bad);
}

// out[idx[j]] = values[j] (the word) or, with add, += in float32.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_topk_scatter(const u32* values, const int* idx,
                                                                             i64 k, float* out, int add) {
    for (i64 j = (i64)blockIdx.x * LP_THREADS + threadIdx.x; j < k; j += (i64)gridDim.x * LP_THREADS) {
        const i64 i = idx[j];
        if (add) out[i] = out[i] + __uint_as_float(values[j]);
        else reinterpret_cast<u32*>(out)[i] = values[j];
    }
}

// adaptive_decode's checks (head: total, offsets, means as words; entries at any address):
// status |= 1 a total other than capacity (exact) or outside [0, capacity], 2 offsets not
// ascending from 0 to at most the total, 4 an index outside [0, cols), 8 indices not strictly
// ascending within a group. Checks past a failed one only read within bounds.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_adaptive_check(const u32* head, const u8* entries,
                                                                               i64 capacity, int exact, i64 rows,
                                                                               i64 cols, int wide, u32* status) {
    const i64 total = (i64)(int)head[0];
    const i64 first = (i64)blockIdx.x * LP_THREADS + threadIdx.x, step = (i64)gridDim.x * LP_THREADS;
    u32 bad = 0;
    if (first == 0 && (exact ? total != capacity : (total < 0 || total > capacity))) bad |= 1u;
    const u32* offsets = head + 1;
    for (i64 r = first; r < rows; r += step) {
        const i64 start = (i64)(int)offsets[r];
        const i64 end = r + 1 < rows ? (i64)(int)offsets[r + 1] : total;
        if ((r == 0 && start != 0) || end < start) bad |= 2u;
    }
    const i64 count = min(max(total, (i64)0), capacity);
    for (i64 j = first; j < count; j += step) {
        const i64 e = sparse_get(entries, j, wide);
        if (e < 0 || (e >> 1) >= cols) bad |= 4u;
        if (j > 0) {
            const i64 r = sparse_row_of(offsets, rows, j);
            if (r >= 0 && j - 1 >= (i64)(int)offsets[r] && (e >> 1) <= (sparse_get(entries, j - 1, wide) >> 1))
                bad |= 8u;
        }
    }
    if (bad) atomicOr(status, bad);
}

// Each entry's region mean into (add: onto) out, entry c of group r at r * stride + c * step.
extern "C" __global__ __launch_bounds__(LP_THREADS) void sparse_adaptive_scatter(const u32* head,
                                                                                 const u8* entries, i64 rows,
                                                                                 i64 stride, i64 step, int wide,
                                                                                 float* out, int add) {
    const i64 total = (i64)(int)head[0];
    for (i64 j = (i64)blockIdx.x * LP_THREADS + threadIdx.x; j < total; j += (i64)gridDim.x * LP_THREADS) {
        const i64 r = sparse_row_of(head + 1, rows, j);
        const i64 e = sparse_get(entries, j, wide);
        const u32 v = head[1 + ((e & 1) ? 2 : 1) * rows + r];
        const i64 i = r * stride + (e >> 1) * step;
        if (add) out[i] = out[i] + __uint_as_float(v);
        else reinterpret_cast<u32*>(out)[i] = v;
    }
}
