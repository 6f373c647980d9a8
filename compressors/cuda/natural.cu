// natural (compressors/codecs/natural.py, kernels/natural.py): integer steps on the float32 bits. An
// entry's exponent code is E + (U < 2 m) for a finite entry (at most 254), E for an infinity, 0 for
// a NaN (sent as -0's code); its sign bit 1 for a negative nonzero code or a NaN.
//
// A thread takes units of eight entries: two float4 loads (x 16-byte aligned), eight codes as one
// u64 store (codes 8-byte aligned, else bytes), one byte of signs; a warp writes 256 code bytes
// and 32 sign bytes, each contiguous. Decode likewise, eight values as two float4.

// (code | negative << 8) of the float32 bits w of entry i.
__device__ __forceinline__ u32 nat_code(u32 w, u32 key, i64 i) {
    const int e = (int)((w >> 23) & 0xFFu);
    const int m = (int)(w & 0x7FFFFFu);
    if (e == 255) return m == 0 ? (255u | ((w >> 31) << 8)) : (1u << 8);
    const int draw = (int)(lp_uniform(key, (u32)i) * 16777216.0f);  // the hash's 24 bits: exact
    int code = e + (draw < 2 * m ? 1 : 0);
    code = code < 254 ? code : 254;
    return (u32)code | (code != 0 ? (w >> 31) << 8 : 0u);
}

extern "C" __global__ __launch_bounds__(LP_THREADS) void
natural_encode(const u32* __restrict__ words, long long n, u32 key, u8* __restrict__ codes, u8* __restrict__ signs,
               int vec, int aligned) {
    const i64 units = (n + 7) / 8;
    for (i64 u = (i64)blockIdx.x * LP_THREADS + threadIdx.x; u < units; u += (i64)gridDim.x * LP_THREADS) {
        const i64 i = 8 * u;
        const int count = (int)min((i64)8, n - i);
        u32 w[8];
        if (vec && count == 8) {
            const uint4 a = *reinterpret_cast<const uint4*>(words + i);
            const uint4 b = *reinterpret_cast<const uint4*>(words + i + 4);
            w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
            w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
        } else {
#pragma unroll
            for (int t = 0; t < 8; ++t) w[t] = t < count ? words[i + t] : 0u;
        }
        u64 packed = 0;
        u32 byte = 0;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const u32 c = nat_code(w[t], key, i + t);
            packed |= (u64)(c & 0xFFu) << (8 * t);
            byte |= (c >> 8) << t;
        }
        if (aligned && count == 8) {
            *reinterpret_cast<u64*>(codes + i) = packed;
        } else {
#pragma unroll
            for (int t = 0; t < 8; ++t)
                if (t < count) codes[i + t] = (u8)(packed >> (8 * t));
        }
        signs[u] = (u8)(count == 8 ? byte : byte & ((1u << count) - 1));
    }
}

// out[i] (+)= (-1)**sign * 2**(code - 127) as float32 bits; the code of -0 is NaN (0x7FC00000).
extern "C" __global__ __launch_bounds__(LP_THREADS) void
natural_decode(const u8* __restrict__ codes, const u8* __restrict__ signs, long long n, int add, int aligned, int vec,
               float* __restrict__ out) {
    const i64 units = (n + 7) / 8;
    for (i64 u = (i64)blockIdx.x * LP_THREADS + threadIdx.x; u < units; u += (i64)gridDim.x * LP_THREADS) {
        const i64 i = 8 * u;
        const int count = (int)min((i64)8, n - i);
        u64 c8 = 0;
        if (aligned && count == 8) {
            c8 = *reinterpret_cast<const u64*>(codes + i);
        } else {
            for (int t = 0; t < count; ++t) c8 |= (u64)codes[i + t] << (8 * t);
        }
        const u32 s = signs[u];
        float v[8];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            const u32 code = (u32)(c8 >> (8 * t)) & 0xFFu;
            const u32 negative = (s >> t) & 1u;
            const u32 word = negative && code == 0 ? 0x7FC00000u : (code << 23) | (negative << 31);
            v[t] = __uint_as_float(word);
        }
        lp_store8(out + i, v, count, add, vec);
    }
}
