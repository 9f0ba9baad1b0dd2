"""T.fill / T.clear on the CPU backend, whole buffers and slices."""

import torch

import tilelang
import tilelang.language as T


def test_fill_and_clear_slices():
    @T.prim_func
    def main(Y: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            y = T.alloc_fragment((8, 8), "float32")
            T.fill(y, 3.5)
            T.clear(y[0:2, :])
            T.fill(y[4, 0:4], -1)
            T.copy(y, Y)

    k = tilelang.compile(main, out_idx=[0], target="cpu")
    ref = torch.full((8, 8), 3.5)
    ref[0:2] = 0
    ref[4, 0:4] = -1
    torch.testing.assert_close(k(), ref)
