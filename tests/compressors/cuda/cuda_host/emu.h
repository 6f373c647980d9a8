// Host emulation of the CUDA C that compressors/cuda/*.cu use, for the tests on a machine
// without a GPU: the program compiles with g++, and each block's 256 CUDA threads run as fibers
// on one OS thread, switched at every barrier, so __syncthreads, warp shuffles and atomics keep
// their meaning. A fiber starts with setcontext on its own stack and then switches with
// _setjmp/_longjmp, which (unlike swapcontext) make no system call.
// Blocks run one after another. __shared__ variables live in one linker section that is
// poisoned (0xFF bytes) before every block, as a GPU's shared memory is not zeroed.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <stdio.h>
#include <setjmp.h>
#include <ucontext.h>
#include <atomic>
#include <functional>
#include <vector>

struct dim3 { unsigned x = 1, y = 1, z = 1; };

namespace lpemu {
constexpr unsigned kThreads = 256;
constexpr size_t kStack = 256 * 1024;

enum class State { runnable, at_block, at_warp, done };

struct Fiber {
    ucontext_t start;
    jmp_buf resume;
    bool started;
    State state;
};

inline dim3 thread_index, block_index, block_dim, grid_dim;  // thread_index: the fiber running now
inline Fiber fibers[kThreads];
inline jmp_buf scheduler;
inline uint64_t exchange[kThreads];
inline int block_count;  // __syncthreads_count's tally
inline const std::function<void()>* body = nullptr;
inline std::vector<char> stacks;

[[noreturn]] inline void fail(const char* what) {
    fprintf(stderr, "cuda host emulator: %s (thread %u of block %u)\n", what, thread_index.x, block_index.x);
    abort();
}

// Leave the running fiber at a barrier of kind `state`; back here once the barrier is released.
inline void wait(State state) {
    Fiber& f = fibers[thread_index.x];
    f.state = state;
    if (!_setjmp(f.resume)) _longjmp(scheduler, 1);
}

inline void entry(unsigned t) {
    (*body)();
    fibers[t].state = State::done;
    _longjmp(scheduler, 1);  // never returns: the scheduler's frame is where _setjmp left it
}

inline unsigned lane() { return thread_index.x & 31; }
inline void check_mask(unsigned mask) { if (mask != 0xffffffffu) fail("warp intrinsic with a partial mask"); }

template <class T> T exchange_with(T v, unsigned source) {
    static_assert(sizeof(T) <= 8, "warp exchange of more than 8 bytes");
    const unsigned warp_base = thread_index.x & ~31u;
    uint64_t word = 0;
    memcpy(&word, &v, sizeof(T));
    exchange[thread_index.x] = word;
    wait(State::at_warp);
    word = exchange[warp_base + source];
    wait(State::at_warp);
    T r;
    memcpy(&r, &word, sizeof(T));
    return r;
}

extern "C" char __start_lpshared[] __attribute__((weak));
extern "C" char __stop_lpshared[] __attribute__((weak));

// Run one block: every fiber until it waits or ends; then release a barrier every live thread of
// the block (or of a warp) waits at. Neither possible while some wait: a deadlock, as on a GPU.
inline void run_block() {
    for (unsigned t = 0; t < kThreads; ++t) {
        Fiber& f = fibers[t];
        getcontext(&f.start);
        f.start.uc_stack.ss_sp = stacks.data() + t * kStack;
        f.start.uc_stack.ss_size = kStack;
        f.start.uc_link = nullptr;
        makecontext(&f.start, (void (*)())entry, 1, t);
        f.started = false;
        f.state = State::runnable;
    }
    for (;;) {
        for (unsigned t = 0; t < kThreads; ++t) {
            if (fibers[t].state != State::runnable) continue;
            thread_index = {t, 0, 0};
            if (!_setjmp(scheduler)) {
                if (fibers[t].started) _longjmp(fibers[t].resume, 1);
                fibers[t].started = true;
                setcontext(&fibers[t].start);
            }
        }
        unsigned live = 0, at_block = 0;
        for (auto& f : fibers) { live += f.state != State::done; at_block += f.state == State::at_block; }
        if (live == 0) return;
        bool released = false;
        if (at_block == live) {
            for (auto& f : fibers) if (f.state == State::at_block) f.state = State::runnable;
            continue;
        }
        for (unsigned w = 0; w < kThreads; w += 32) {
            unsigned warp_live = 0, at_warp = 0;
            for (unsigned t = w; t < w + 32; ++t) {
                warp_live += fibers[t].state != State::done;
                at_warp += fibers[t].state == State::at_warp;
            }
            if (warp_live && at_warp == warp_live) {
                for (unsigned t = w; t < w + 32; ++t) if (fibers[t].state == State::at_warp) fibers[t].state = State::runnable;
                released = true;
            }
        }
        if (!released) fail("deadlock: threads wait at barriers that can never be released");
    }
}

// Run f() as blocks x kThreads CUDA threads.
inline void launch(unsigned blocks, const std::function<void()>& f) {
    grid_dim = {blocks, 1, 1};
    block_dim = {kThreads, 1, 1};
    if (stacks.empty()) stacks.resize(kThreads * kStack);
    body = &f;
    for (unsigned b = 0; b < blocks; ++b) {
        block_index = {b, 0, 0};
        block_count = 0;
        if (__start_lpshared != __stop_lpshared) memset(__start_lpshared, 0xFF, __stop_lpshared - __start_lpshared);
        run_block();
    }
    body = nullptr;
}
}  // namespace lpemu

#define threadIdx lpemu::thread_index
#define blockIdx lpemu::block_index
#define blockDim lpemu::block_dim
#define gridDim lpemu::grid_dim
#define warpSize 32
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ __attribute__((section("lpshared"))) static

inline void __syncthreads() { lpemu::wait(lpemu::State::at_block); }
inline int __syncthreads_count(int p) {
    __syncthreads();
    if (p) lpemu::block_count += 1;
    __syncthreads();
    const int r = lpemu::block_count;
    __syncthreads();
    if (threadIdx.x == 0) lpemu::block_count = 0;
    __syncthreads();
    return r;
}
inline int __syncthreads_or(int p) { return __syncthreads_count(p) != 0; }
inline int __syncthreads_and(int p) { return __syncthreads_count(p) == (int)blockDim.x; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { lpemu::check_mask(mask); lpemu::wait(lpemu::State::at_warp); }
inline unsigned __activemask() { return 0xffffffffu; }
inline void __threadfence() {}
inline void __threadfence_block() {}

template <class T> T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    lpemu::check_mask(mask);
    const unsigned lane = lpemu::lane();
    return lpemu::exchange_with(v, (lane & ~(unsigned)(width - 1)) | ((unsigned)src & (width - 1)));
}
template <class T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    lpemu::check_mask(mask);
    const unsigned lane = lpemu::lane();
    unsigned src = lane ^ (unsigned)lane_mask;
    if ((src & ~(unsigned)(width - 1)) != (lane & ~(unsigned)(width - 1))) src = lane;
    return lpemu::exchange_with(v, src);
}
template <class T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    lpemu::check_mask(mask);
    const unsigned lane = lpemu::lane();
    return lpemu::exchange_with(v, (lane & (width - 1)) + delta >= (unsigned)width ? lane : lane + delta);
}
template <class T> T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    lpemu::check_mask(mask);
    const unsigned lane = lpemu::lane();
    return lpemu::exchange_with(v, (lane & (width - 1)) < delta ? lane : lane - delta);
}
inline unsigned __ballot_sync(unsigned mask, int p) {
    lpemu::check_mask(mask);
    const unsigned base = threadIdx.x & ~31u;
    lpemu::exchange[threadIdx.x] = p != 0;
    lpemu::wait(lpemu::State::at_warp);
    unsigned bits = 0;
    for (unsigned i = 0; i < 32; ++i) bits |= (unsigned)lpemu::exchange[base + i] << i;
    lpemu::wait(lpemu::State::at_warp);
    return bits;
}
inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
inline int __all_sync(unsigned mask, int p) { return __ballot_sync(mask, p) == 0xffffffffu; }

template <class T> T atomicAdd(T* a, T v) { return std::atomic_ref<T>(*a).fetch_add(v); }
template <class T> T atomicSub(T* a, T v) { return std::atomic_ref<T>(*a).fetch_sub(v); }
template <class T> T atomicOr(T* a, T v) { return std::atomic_ref<T>(*a).fetch_or(v); }
template <class T> T atomicAnd(T* a, T v) { return std::atomic_ref<T>(*a).fetch_and(v); }
template <class T> T atomicXor(T* a, T v) { return std::atomic_ref<T>(*a).fetch_xor(v); }
template <class T> T atomicExch(T* a, T v) { return std::atomic_ref<T>(*a).exchange(v); }
template <class T> T atomicCAS(T* a, T expected, T desired) {
    std::atomic_ref<T>(*a).compare_exchange_strong(expected, desired);
    return expected;
}
template <class T> T atomicMax(T* a, T v) {
    std::atomic_ref<T> r(*a);
    T old = r.load();
    while (old < v && !r.compare_exchange_weak(old, v)) {}
    return old;
}
template <class T> T atomicMin(T* a, T v) {
    std::atomic_ref<T> r(*a);
    T old = r.load();
    while (v < old && !r.compare_exchange_weak(old, v)) {}
    return old;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
template <class T> T __ldg(const T* p) { return *p; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }

// CUDA's min/max: fminf/fmaxf for floating point (a NaN loses), the plain compare for integers.
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
template <class T> T min(T a, T b) { return b < a ? b : a; }
template <class T> T max(T a, T b) { return a < b ? b : a; }

struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(8) int2 { int x, y; };
struct alignas(4) uchar4 { unsigned char x, y, z, w; };
struct alignas(2) uchar2 { unsigned char x, y; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) { return {x, y, z, w}; }
inline uchar2 make_uchar2(unsigned char x, unsigned char y) { return {x, y}; }
