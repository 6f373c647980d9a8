"""The host emulator (cuda_host, beside this file) itself: CUDA's meaning for the features the programs use,
so that a kernel it passes is not passed by the emulator's own leniency."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from compressors.cuda import build
from compressors.core.pairwise import pairwise_sum
from tests.compressors.cuda import cuda_host

if cuda_host.available():
    pytest.skip(f"the CUDA host emulator cannot run: {cuda_host.available()}", allow_module_level=True)

PROGRAM = (build.SOURCE_DIR / "common.cuh").read_text() + r'''
extern "C" __global__ void tree_sum(const float* __restrict__ x, i64 n, double* out) {
    // One block: thread t sums leaves [t c, t c + c) of the tree over n padded to P >= LP_THREADS.
    const i64 P = lp_pow2_ceil(n) < LP_THREADS ? LP_THREADS : lp_pow2_ceil(n);
    const i64 c = P / LP_THREADS, lo = (i64)threadIdx.x * c;
    LpTree t;
    lp_tree_init(t);
    i64 count = 0;
    for (i64 i = lo; i < lo + c && i < n; ++i, ++count) lp_tree_push(t, (double)x[i], 0);
    const double s = lp_block_tree(lp_tree_total(t, count, c));
    if (threadIdx.x == 0) out[0] = s;
}

extern "C" __global__ void features(u32* out, u32* shared_seen) {
    __shared__ u32 never_written[4];
    __shared__ int counter;
    if (threadIdx.x == 0) counter = 0;
    __syncthreads();
    atomicAdd(&counter, 1);
    const int odd = __syncthreads_count(threadIdx.x & 1);
    const unsigned ballot = __ballot_sync(LP_FULL, threadIdx.x & 2);
    const u32 from_right = __shfl_down_sync(LP_FULL, (u32)threadIdx.x, 3);
    const u32 max_bits = lp_block_max(threadIdx.x * 7u);
    if (threadIdx.x == 5) {
        out[0] = counter; out[1] = odd; out[2] = ballot; out[3] = from_right; out[4] = max_bits;
        out[5] = blockIdx.x; out[6] = gridDim.x;
    }
    if (threadIdx.x == 0) shared_seen[blockIdx.x] = never_written[0];
}
'''


def _pairwise(x: np.ndarray) -> float:
    return float(pairwise_sum(torch.from_numpy(x.astype(np.float64)).view(1, -1))[0])


@pytest.fixture(scope="module")
def kernels():
    return cuda_host.HostKernels("selftest", PROGRAM)


def test_the_tree_helpers_sum_as_compressors_pairwise(kernels):
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 255, 256, 257, 1000, 4097):
        x = (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(np.float32)
        out = np.zeros(1)
        kernels("tree_sum", 1, x, np.int64(n), out)
        assert out[0] == _pairwise(x), n  # a serial or numpy sum differs in the last bits for these


def test_barriers_warps_atomics_and_poisoned_shared_memory(kernels):
    out, seen = np.zeros(7, np.uint32), np.zeros(2, np.uint32)
    kernels("features", 2, out, seen)
    assert out.tolist() == [256, 128, 0xCCCCCCCC, 8, 255 * 7, 1, 2]
    assert seen.tolist() == [0xFFFFFFFF, 0xFFFFFFFF]  # shared memory is not zeroed on a GPU


def test_arguments_are_checked_against_the_c_parameters(kernels):
    with pytest.raises(TypeError, match="expected int64, got int"):
        kernels("tree_sum", 1, np.zeros(4, np.float32), 4, np.zeros(1))
    with pytest.raises(TypeError, match="an array of float64"):
        kernels("tree_sum", 1, np.zeros(4), np.int64(4), np.zeros(1))
    with pytest.raises(TypeError, match="2 arguments for 3"):
        kernels("tree_sum", 1, np.zeros(4, np.float32), np.int64(4))
