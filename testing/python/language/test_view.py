"""T.reshape / T.view: another buffer over the same memory (shape, or element type)."""

import pytest
from tvm import tirx
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def _views():
    @T.prim_func
    def main(A: T.Tensor((4, 8), T.float32), B: T.Tensor((2, 16), T.float32),
             C: T.Tensor((4, 8), T.int32), D: T.Tensor((4, 16), T.float16)):
        with T.Kernel(1, threads=32) as bx:
            S = T.alloc_shared((4, 8), T.float32)
            T.copy(A, S)
            V = T.reshape(S, (2, 16))
            for i, j in T.Parallel(2, 16):
                B[i, j] = V[i, j] + 1
            T.copy(T.view(S, dtype=T.int32), C)
            T.copy(T.view(A, dtype="float16"), D)            # (4, 8) fp32 -> (4, 16) fp16
    return main


def test_reshape_and_view_read_the_same_memory():
    a = torch.arange(32).float().reshape(4, 8)
    b, c, d = tilelang.compile(_views(), out_idx=[1, 2, 3], target="cpu")(a)
    torch.testing.assert_close(b, a.reshape(2, 16) + 1)
    assert torch.equal(c, a.view(torch.int32))
    assert torch.equal(d, a.view(torch.float16))


def test_writes_through_a_view_are_seen_by_the_buffer():
    @T.prim_func
    def main(B: T.Tensor((4, 4), T.float32)):
        with T.Kernel(1, threads=1) as bx:
            L = T.alloc_local((4, 4), T.float32)
            flat = T.reshape(L, 16)
            for i in T.serial(16):
                flat[i] = i
            for i, j in T.grid(4, 4):
                B[i, j] = L[i, j]

    out = tilelang.compile(main, out_idx=[0], target="cpu")()
    assert out.flatten().tolist() == list(range(16))


def test_view_size_mismatch_names_the_buffer():
    with pytest.raises(DSLError, match=r"T.reshape\(S, \(3, 16\)\).*\(32 elements\).*48"):
        @T.prim_func
        def bad(A: T.Tensor((4, 8), T.float32)):
            with T.Kernel(1, threads=32) as bx:
                S = T.alloc_shared((4, 8), T.float32)
                V = T.reshape(S, (3, 16))
                T.copy(A, V[0:2, 0:16])
    with pytest.raises(AssertionError):  # what the public TileLang raises there
        T.view(tirx.decl_buffer((4, 8), "float32", name="S"), (3, 16))


def test_views_of_shared_tiles_lower_for_cuda():
    """A view of a shared tile is the tile's bytes (test_shared_views.py has the details):
    the program that reads S through a reshape and a dtype view lowers for sm_90a."""
    src = tilelang.compile(_views(), out_idx=[1, 2, 3], target="cuda -arch=sm_90a")
    assert src.get_kernel_source()
