"""T.fill / T.clear on the CPU backend, whole buffers and slices."""

import shutil

import pytest
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


def _fill_run_time_region():
    n = T.dynamic("n")

    @T.prim_func
    def main(x: T.Tensor((n,), "int64"), lo: T.int32, hi: T.int32):
        with T.Kernel(1, threads=128):
            T.fill(x[lo:hi], 7)

    return main


def test_fill_of_a_region_of_run_time_extent():
    x = torch.zeros(300, dtype=torch.int64)
    tilelang.compile(_fill_run_time_region(), target="cpu")(x, 5, 290)
    assert x.tolist() == [0] * 5 + [7] * 285 + [0] * 10


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_fill_of_a_region_of_run_time_extent_compiles_for_cuda():
    assert "st.global" in tilelang.compile(_fill_run_time_region(),
                                           target="cuda -arch=sm_90a").get_ptx()


@pytest.mark.gpu
def test_fill_of_a_region_of_run_time_extent_on_the_gpu():
    x = torch.zeros(1000, dtype=torch.int64, device="cuda")
    tilelang.compile(_fill_run_time_region(), target="cuda")(x, 3, 997)
    assert x.tolist() == [0] * 3 + [7] * 994 + [0] * 3
