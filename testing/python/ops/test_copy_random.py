"""T.copy against a numpy model over random tile sizes, offsets and edges (CPU backend)."""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


def window_copy(M, N, bM, bN, oi, oj):
    """Each block copies the bM x bN window that starts at (by*bM + oi, bx*bN + oj) of A into
    B's tile (by, bx); parts of the window outside A read as zero."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=32) as (bx, by):
            S = T.alloc_shared((bM, bN), "float32")
            T.copy(A[by * bM + oi, bx * bN + oj], S)
            T.copy(S, B[by * bM, bx * bN])

    return main


def model(a, bM, bN, oi, oj):
    M, N = a.shape
    out = np.zeros_like(a)
    for by in range(-(-M // bM)):
        for bx in range(-(-N // bN)):
            for i in range(bM):
                for j in range(bN):
                    si, sj = by * bM + oi + i, bx * bN + oj + j
                    di, dj = by * bM + i, bx * bN + j
                    if di < M and dj < N:
                        out[di, dj] = a[si, sj] if (0 <= si < M and 0 <= sj < N) else 0
    return out


@pytest.mark.parametrize("seed", range(6))
def test_random_windows(seed):
    rng = np.random.default_rng(seed)
    M, N = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    bM, bN = int(rng.integers(1, 17)), int(rng.integers(1, 17))
    oi, oj = int(rng.integers(0, 5)), int(rng.integers(0, 5))
    k = tilelang.compile(window_copy(M, N, bM, bN, oi, oj), out_idx=[1], target="cpu")
    a = rng.standard_normal((M, N)).astype(np.float32)
    np.testing.assert_array_equal(k(torch.from_numpy(a)).numpy(), model(a, bM, bN, oi, oj))


@pytest.mark.parametrize("seed", range(3))
def test_random_negative_offsets(seed):
    rng = np.random.default_rng(100 + seed)
    M, N, bM, bN = 23, 17, 8, 8
    oi, oj = -int(rng.integers(1, 4)), -int(rng.integers(1, 4))
    k = tilelang.compile(window_copy(M, N, bM, bN, oi, oj), out_idx=[1], target="cpu")
    a = rng.standard_normal((M, N)).astype(np.float32)
    np.testing.assert_array_equal(k(torch.from_numpy(a)).numpy(), model(a, bM, bN, oi, oj))
