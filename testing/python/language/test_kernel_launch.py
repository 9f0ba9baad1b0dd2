"""T.Kernel's launch shape: grid extents and thread counts as the public TileLang spells them."""

import torch

import tilelang
import tilelang.language as T


def test_kernel_without_grid_is_one_block():
    @T.prim_func
    def main(A: T.Tensor((8,), T.float32), B: T.Tensor((8,), T.float32)):
        with T.Kernel(threads=8):
            for i in T.Parallel(8):
                B[i] = A[i] * 2

    kernel = tilelang.compile(main, target="cpu")
    a, b = torch.arange(8, dtype=torch.float32), torch.zeros(8)
    kernel(a, b)
    torch.testing.assert_close(b, a * 2)
    src = tilelang.compile(main, target="cuda -arch=sm_90a").get_kernel_source()
    assert "__launch_bounds__(8)" in src and "blockIdx" not in src
