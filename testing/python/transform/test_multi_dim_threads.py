"""``threads=(x, y)`` blocks: kept as written while the tile work is per thread."""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError

CUDA = "cuda -arch=sm_80"


def splitk_dot(n=8, k=16):
    """C[i] = sum_j A[j] * B[i, j]: threadIdx.x picks the row, threadIdx.y a slice of j,
    combined with per-thread buffers, element atomics and a shared row of partial sums."""

    @T.prim_func
    def main(A: T.Tensor((k,), "float32"), B: T.Tensor((n, k), "float32"),
             C: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=(n, 4)) as b:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            acc = T.alloc_local((1,), "float32")
            part = T.alloc_shared((n,), "float32")
            if tk == 0:
                part[tn] = 0.0
            T.clear(acc)
            for j in T.serial(k // 4):
                acc[0] += A[tk * (k // 4) + j] * B[tn, tk * (k // 4) + j]
            T.atomic_add(part[tn], acc[0])
            if tk == 0:
                C[tn] = part[tn]

    return main


def test_per_thread_kernel_keeps_its_2d_block_on_cuda():
    mod = tilelang.lower(splitk_dot(), target=CUDA)  # used to raise "1-D block of threads"
    text = str(mod)
    assert "threadIdx.y" in text


@pytest.mark.gpu
def test_per_thread_2d_kernel_on_gpu():
    a = torch.arange(16, dtype=torch.float32).cuda()
    b = (torch.ones(8, 16) * torch.arange(8, dtype=torch.float32)[:, None]).cuda()
    k = tilelang.compile(splitk_dot(), out_idx=[2])
    np.testing.assert_allclose(k(a, b).cpu().numpy(), (b @ a).cpu().numpy())


def test_tiles_spread_over_a_2d_block_are_rejected_by_name():
    @T.prim_func
    def main(X: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=(32, 2)) as bx:
            x = T.alloc_fragment((64,), "float32")
            T.copy(X, x)
            for i in T.Parallel(64):
                X[i] = x[i] + 1.0

    with pytest.raises(LoweringError, match="fragment x is spread over the block's threads"):
        tilelang.lower(main, target=CUDA)
