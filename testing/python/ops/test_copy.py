"""T.copy on the CPU backend: regions, element-index starts, edges, dtype conversion."""

import pytest
import torch

import tilelang
import tilelang.language as T


def tile_copy(M, N, bM, bN, src_dtype="float32", dst_dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), src_dtype), B: T.Tensor((M, N), dst_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            S = T.alloc_shared((bM, bN), src_dtype)
            F = T.alloc_fragment((bM, bN), dst_dtype)
            T.copy(A[by * bM, bx * bN], S)
            T.copy(S, F)
            T.copy(F, B[by * bM, bx * bN])

    return main


@pytest.mark.parametrize("M,N", [(64, 64), (70, 45), (1, 33)])
def test_copy_round_trip_with_ragged_edges(M, N):
    k = tilelang.compile(tile_copy(M, N, 32, 16), out_idx=[1], target="cpu")
    a = torch.randn(M, N)
    torch.testing.assert_close(k(a), a)


def test_copy_converts_dtype():
    k = tilelang.compile(tile_copy(40, 40, 16, 16, "float32", "float16"), out_idx=[1], target="cpu")
    a = torch.randn(40, 40)
    torch.testing.assert_close(k(a), a.half())


def test_out_of_range_source_reads_zero():
    @T.prim_func
    def main(A: T.Tensor((10,), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            S = T.alloc_fragment((16,), "float32")
            T.copy(A[0], S)  # 16 elements from a 10-element tensor
            T.copy(S, B)

    k = tilelang.compile(main, out_idx=[1], target="cpu")
    a = torch.randn(10)
    b = k(a)
    torch.testing.assert_close(b[:10], a)
    assert torch.all(b[10:] == 0)


def test_out_of_range_destination_is_not_written():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((5,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            S = T.alloc_fragment((8,), "float32")
            T.copy(A, S)
            T.copy(S, B[0])

    k = tilelang.compile(main, target="cpu")
    a = torch.arange(8, dtype=torch.float32)
    guard = torch.full((7,), -1.0)
    b = guard[:5]  # a view: elements 5 and 6 of `guard` must survive
    k(a, b)
    torch.testing.assert_close(guard[:5], a[:5])
    assert torch.all(guard[5:] == -1)


def test_slices_and_unit_dims():
    @T.prim_func
    def main(A: T.Tensor((2, 3, 32, 16), "float32"), B: T.Tensor((2, 3, 16, 32), "float32")):
        with T.Kernel(3, 2, threads=64) as (bx, by):
            S = T.alloc_shared((32, 16), "float32")
            T.copy(A[by, bx, 0:32, :], S)
            for i, j in T.Parallel(16, 32):
                B[by, bx, i, j] = S[j, i]

    k = tilelang.compile(main, out_idx=[1], target="cpu")
    a = torch.randn(2, 3, 32, 16)
    torch.testing.assert_close(k(a), a.transpose(2, 3).contiguous())


def test_copy_between_two_elements_copies_that_element():
    """T.copy(A[i], B[j]) (the public form) moves exactly one element."""

    @T.prim_func
    def main(A: T.Tensor((64, 4), "float32"), B: T.Tensor((64, 4), "float32")):
        with T.Kernel(2, threads=32) as bx:
            T.copy(A[bx * 32, 1], B[bx * 32 + 1, 2])

    kernel = tilelang.compile(main, target="cpu")
    a, b = torch.randn(64, 4), torch.zeros(64, 4)
    kernel(a, b)
    want = torch.zeros(64, 4)
    want[1, 2], want[33, 2] = a[0, 1], a[32, 1]
    torch.testing.assert_close(b, want)
    assert "B_ptr" in tilelang.compile(main, target="cuda -arch=sm_90a").get_kernel_source()
