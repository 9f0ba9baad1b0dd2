"""T.cumsum on the CPU backend: each dim, forward and reverse, in place and out of place."""

import pytest
import torch

import tilelang
import tilelang.language as T


def cumsum_kernel(M, N, dim, reverse, in_place):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=64) as bx:
            x = T.alloc_shared((M, N), "float32")
            y = T.alloc_shared((M, N), "float32")
            T.copy(X, x)
            if in_place:
                T.cumsum(x, dim=dim, reverse=reverse)
                T.copy(x, Y)
            else:
                T.cumsum(x, y, dim=dim, reverse=reverse)
                T.copy(y, Y)

    return main


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_cumsum(dim, reverse, in_place):
    M, N = 12, 20
    k = tilelang.compile(cumsum_kernel(M, N, dim, reverse, in_place), out_idx=[1], target="cpu")
    x = torch.randn(M, N)
    ref = x.flip(dim).cumsum(dim).flip(dim) if reverse else x.cumsum(dim)
    torch.testing.assert_close(k(x), ref, rtol=1e-5, atol=1e-5)
