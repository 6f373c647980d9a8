// 1-bit SGD (compressors/codecs/onebit.py): per row of the groups' matrix (a column grouping's is the
// transpose of the 2-D view: onebit_transpose first), the means of the entries >= 0 and < 0, their
// sums the fixed-order float64 tree over exactly the power of two at or above the row's length (a
// row of -0.0 sums to -0.0 only so), and one bit per entry (1: >= 0, a NaN is < 0), LSB first over
// the matrix's flat index. Byte for byte compressors/kernels/onebit.py.
//
// Rows of up to ONEBIT_TILE entries: one block per tile of whole rows read once into shared memory
// (each row an aligned 2**logq-slot segment of the tile's slots); the bytes that straddle two
// tiles (and the last, short byte) are onebit_encode_edges'. Longer rows: aligned 2048-leaf subtrees
// a block (onebit_partials, which also writes the bytes inside its chunk), summed up (onebit_reduce).

#define ONEBIT_TILE 2048  // slots per tile: LP_THREADS threads x 8

// The byte of bits of entries 8g..8g+7 (those below n) of m.
__device__ __forceinline__ u8 onebit_byte(const float* __restrict__ m, i64 n, i64 g) {
    u32 byte = 0;
    for (int j = 0; j < 8; ++j)
        if (8 * g + j < n && m[8 * g + j] >= 0.0f) byte |= 1u << j;
    return (u8)byte;
}

__device__ __forceinline__ float onebit_mean(double sum, double count) {
    return count > 0.0 ? (float)(sum / count) : 0.0f;
}

// dst (cols x rows) = the transpose of the C-order (rows x cols) src: 32 x 32 tiles through shared
// memory, coalesced both ways.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
onebit_transpose(const float* __restrict__ src, long long rows, long long cols, float* __restrict__ dst) {
    __shared__ float tile[32][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const i64 tr = (rows + 31) / 32, tc = (cols + 31) / 32;
    for (i64 k = blockIdx.x; k < tr * tc; k += gridDim.x) {
        const i64 r0 = (k / tc) * 32, c0 = (k % tc) * 32;
        for (int i = ty; i < 32; i += LP_WARPS)
            if (r0 + i < rows && c0 + tx < cols) tile[i][tx] = src[(r0 + i) * cols + c0 + tx];
        __syncthreads();
        for (int i = ty; i < 32; i += LP_WARPS)
            if (c0 + i < cols && r0 + tx < rows) dst[(c0 + i) * rows + r0 + tx] = tile[tx][i];
        __syncthreads();
    }
}

// Rows of cols <= ONEBIT_TILE entries (2**logq the power of two at or above cols): tile i holds
// rows i*per .. i*per+per-1, per = ONEBIT_TILE >> logq; slot 8t + j is entry (slot >> logq) * cols
// + (slot & (q - 1)) of the tile, or padding (+0.0, as the reference pads).
// 4 blocks an SM (64 registers, no spills): the loads of some overlap the others' reductions.
extern "C" __global__ __launch_bounds__(LP_THREADS, 4) void
onebit_encode_tiles(const float* __restrict__ m, long long rows, long long cols, int logq,
                    float* __restrict__ mean_pos, float* __restrict__ mean_neg, u8* __restrict__ packed,
                    int pk_align, int x_al16) {
    __shared__ float4 xs4[ONEBIT_TILE / 4];
    __shared__ double sums[ONEBIT_TILE];
    __shared__ int counts[ONEBIT_TILE];
    __shared__ u8 stage[ONEBIT_TILE / 8 + 8];
    float* xs = reinterpret_cast<float*>(xs4);
    const int t = threadIdx.x;
    const int per = ONEBIT_TILE >> logq;
    const int q = 1 << logq;
    const i64 n = rows * cols;
    const i64 tiles = (rows + per - 1) / per;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 r0 = tile * per;
        const i64 A = r0 * cols;
        const i64 B = min(A + per * cols, n);
        const int len = (int)(B - A);
        if (x_al16 && (A & 3) == 0) {
            const float4* x4 = reinterpret_cast<const float4*>(m + A);
            for (int j = t; j < (len >> 2); j += LP_THREADS) xs4[j] = x4[j];
            for (int j = (len & ~3) + t; j < len; j += LP_THREADS) xs[j] = m[A + j];
        } else {
            for (int j = t; j < len; j += LP_THREADS) xs[j] = m[A + j];
        }
        __syncthreads();
        float v[8];
        bool ok[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int slot = 8 * t + j, leaf = slot & (q - 1);
            const i64 e = (i64)(slot >> logq) * cols + leaf;
            const bool in = leaf < cols && e < len;
            v[j] = in ? xs[e] : 0.0f;
            ok[j] = in && v[j] >= 0.0f;
        }
        double a[8];
        // The counts (exact in float64, any order).
#pragma unroll
        for (int j = 0; j < 8; ++j) a[j] = ok[j] ? 1.0 : 0.0;
        lp_tile_segments<double, LpAdd>(a, logq, sums);
        __syncthreads();
        for (int j = t; j < per; j += LP_THREADS) counts[j] = (int)sums[j];
        __syncthreads();
        // The positive side: a padding slot, or an entry < 0, is a +0.0 leaf.
#pragma unroll
        for (int j = 0; j < 8; ++j) a[j] = ok[j] ? (double)v[j] : 0.0;
        lp_tile_segments<double, LpAdd>(a, logq, sums);
        __syncthreads();
        for (int j = t; j < per && r0 + j < rows; j += LP_THREADS) mean_pos[r0 + j] = onebit_mean(sums[j], counts[j]);
        __syncthreads();
        // The negative side (a padding slot's v is +0.0, itself then).
#pragma unroll
        for (int j = 0; j < 8; ++j) a[j] = ok[j] ? 0.0 : (double)v[j];
        lp_tile_segments<double, LpAdd>(a, logq, sums);
        __syncthreads();
        for (int j = t; j < per && r0 + j < rows; j += LP_THREADS)
            mean_neg[r0 + j] = onebit_mean(sums[j], (double)(cols - counts[j]));
        // The bytes inside [A, B); the ones across A or B are onebit_encode_edges'.
        const i64 gA = (A + 7) >> 3, gB = B >> 3;
        if (gB > gA) {
            const i64 w0 = gA - ((gA + pk_align) & 3);
            const i64 g = gA + t;
            if (g < gB) {
                const int e = (int)(8 * g - A);
                u32 byte = 0;
#pragma unroll
                for (int j = 0; j < 8; ++j) byte |= (xs[e + j] >= 0.0f ? 1u : 0u) << j;
                stage[g - w0] = (u8)byte;
            }
            __syncthreads();
            lp_store_stage(packed, stage, gA, gB, w0);
        }
        __syncthreads();
    }
}

// The bytes that straddle a chunk's end (chunk i ends at ends(i)), and the last, short byte: one
// thread each, from the entries. Tiles end at min(i * per, n); long rows' chunks (per a row)
// end at min(row * cols + (c + 1) * ONEBIT_TILE, (row + 1) * cols).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
onebit_encode_edges(const float* __restrict__ m, long long n, long long cols, long long per, long long chunks,
                    int long_rows, u8* __restrict__ packed) {
    for (i64 i = blockIdx.x * (i64)LP_THREADS + threadIdx.x; i < chunks; i += (i64)gridDim.x * LP_THREADS) {
        i64 end;
        if (long_rows) {
            const i64 row = i / per, c = i - row * per;
            end = min(row * cols + (c + 1) * ONEBIT_TILE, (row + 1) * cols);
        } else {
            end = min((i + 1) * per, n);
        }
        // Two short chunks may end in one byte: both write it whole, alike.
        if (end & 7) packed[end >> 3] = onebit_byte(m, n, end >> 3);
    }
}

// Long rows (cols > ONEBIT_TILE), step 1: chunk c of row r (entries r*cols + c*ONEBIT_TILE.., an
// aligned subtree of the row's tree; padding +0.0) to its two sums and count, and the bytes that lie
// inside the chunk (from L1: the block has just read them).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
onebit_partials(const float* __restrict__ m, long long rows, long long cols, long long per, int x_al16,
                double* __restrict__ sum_pos, double* __restrict__ sum_neg, double* __restrict__ count,
                u8* __restrict__ packed) {
    const int t = threadIdx.x;
    const i64 n = rows * cols;
    for (i64 c = blockIdx.x; c < rows * per; c += gridDim.x) {
        const i64 row = c / per;
        const i64 lo = row * cols + (c - row * per) * ONEBIT_TILE;
        const i64 hi = min(lo + ONEBIT_TILE, (row + 1) * cols);
        const i64 e0 = lo + 8 * t;
        float v[8];
        if (x_al16 && (lo & 3) == 0 && e0 + 8 <= hi) {
            const float4 p = *reinterpret_cast<const float4*>(m + e0);
            const float4 r = *reinterpret_cast<const float4*>(m + e0 + 4);
            v[0] = p.x; v[1] = p.y; v[2] = p.z; v[3] = p.w;
            v[4] = r.x; v[5] = r.y; v[6] = r.z; v[7] = r.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = e0 + j < hi ? m[e0 + j] : 0.0f;
        }
        double p[8], q[8];
        int k = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const bool in = e0 + j < hi;
            const bool ok = in && v[j] >= 0.0f;
            k += ok ? 1 : 0;
            p[j] = ok ? (double)v[j] : 0.0;
            q[j] = ok ? 0.0 : (double)v[j];
        }
        const double sp = lp_block_tree(((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7])));
        const double sn = lp_block_tree(((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7])));
        const double sc = lp_block_tree((double)k);
        if (t == 0) {
            sum_pos[c] = sp;
            sum_neg[c] = sn;
            count[c] = sc;
        }
        const i64 g = ((lo + 7) >> 3) + t;
        if (8 * g + 8 <= hi) packed[g] = onebit_byte(m, n, g);
    }
}

// Long rows, step 2: each row of `len` partials to ceil(len / ONEBIT_TILE): aligned subtrees of
// 2048 leaves while len > 2048, then the tree of exactly the power of two at or above len
// (logq); with `last`, the means.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
onebit_reduce(const double* __restrict__ in_pos, const double* __restrict__ in_neg, const double* __restrict__ in_count,
              long long rows, long long len, int logq, long long cols, int last,
              double* __restrict__ out_pos, double* __restrict__ out_neg, double* __restrict__ out_count,
              float* __restrict__ mean_pos, float* __restrict__ mean_neg) {
    __shared__ double sums[ONEBIT_TILE];
    const int t = threadIdx.x;
    const i64 per = (len + ONEBIT_TILE - 1) / ONEBIT_TILE;
    for (i64 c = blockIdx.x; c < rows * per; c += gridDim.x) {
        const i64 row = c / per;
        const i64 lo = (c - row * per) * ONEBIT_TILE + 8 * t;
        double r[3];
        for (int side = 0; side < 3; ++side) {
            const double* src = (side == 0 ? in_pos : side == 1 ? in_neg : in_count) + row * len;
            double a[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) a[j] = lo + j < len ? src[lo + j] : 0.0;
            lp_tile_segments<double, LpAdd>(a, logq, sums);
            __syncthreads();
            r[side] = sums[0];
            __syncthreads();
        }
        if (t == 0) {
            if (last) {
                mean_pos[row] = onebit_mean(r[0], r[2]);
                mean_neg[row] = onebit_mean(r[1], (double)cols - r[2]);
            } else {
                out_pos[c] = r[0];
                out_neg[c] = r[1];
                out_count[c] = r[2];
            }
        }
    }
}

// Decode of a row grouping: a group of 8 entries (one byte) a thread.
extern "C" __global__ __launch_bounds__(LP_THREADS) void
onebit_decode_rows(const u8* __restrict__ packed, long long n, long long cols, const float* __restrict__ mean_pos,
                   const float* __restrict__ mean_neg, float* __restrict__ out, int add, int out_al16) {
    for (i64 g = blockIdx.x * (i64)LP_THREADS + threadIdx.x; 8 * g < n; g += (i64)gridDim.x * LP_THREADS) {
        const i64 e0 = 8 * g;
        const u32 byte = packed[g];
        const int count = (int)min((i64)8, n - e0);
        i64 row = e0 / cols;
        i64 edge = (row + 1) * cols;
        float p = mean_pos[row], q = mean_neg[row];
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (j < count) {
                while (e0 + j >= edge) {  // rows shorter than 8
                    row += 1;
                    edge += cols;
                    p = mean_pos[row];
                    q = mean_neg[row];
                }
                v[j] = (byte >> j) & 1u ? p : q;
            }
        }
        lp_store8(out + e0, v, count, add, out_al16);
    }
}

// Decode of a column grouping straight into out in the input's order, the C-order (length x groups)
// matrix whose column g is group g (bits g*length..): a thread per (8 rows, column), its 8 bits
// from one or two bytes, its 8 stores coalesced with its warp's neighbours' (adjacent columns).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
onebit_decode_columns(const u8* __restrict__ packed, long long nbytes, long long groups, long long length,
                      const float* __restrict__ mean_pos, const float* __restrict__ mean_neg,
                      float* __restrict__ out, int add) {
    const i64 bands = (length + 7) / 8, spans = (groups + LP_THREADS - 1) / LP_THREADS;
    for (i64 k = blockIdx.x; k < bands * spans; k += gridDim.x) {
        const i64 i0 = (k / spans) * 8;
        const i64 g = (k % spans) * LP_THREADS + threadIdx.x;
        if (g >= groups) continue;
        const i64 b = g * length + i0;
        const i64 at = b >> 3;
        const int shift = (int)(b & 7);
        u32 window = packed[at];
        if (shift && at + 1 < nbytes) window |= (u32)packed[at + 1] << 8;
        window >>= shift;
        const float p = mean_pos[g], q = mean_neg[g];
        const int rows = (int)min((i64)8, length - i0);
        for (int j = 0; j < rows; ++j) {
            const float v = (window >> j) & 1u ? p : q;
            float* o = out + (i0 + j) * groups + g;
            *o = add ? *o + v : v;
        }
    }
}
