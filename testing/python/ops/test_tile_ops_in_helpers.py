"""Tile operators called from a plain Python helper inside a kernel body (the public test
programs do this: ``def _reduce(src, dst): T.reduce_sum(src, dst, dim=1)``) are emitted where
the helper runs: the helper returns nothing, so the parser never sees their calls."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T


def _reduce_rows(src, dst):
    T.reduce_sum(src, dst, dim=1)


def _copy_in(A, S):
    for _ in range(1):  # any Python around it
        T.copy(A, S)


def _program():
    @T.prim_func
    def main(A: T.Tensor((4, 8), T.float32), B: T.Tensor((4,), T.float32)):
        with T.Kernel(1, threads=32) as bx:
            S = T.alloc_fragment((4, 8), T.float32)
            D = T.alloc_fragment((4,), T.float32)
            _copy_in(A, S)
            _reduce_rows(S, D)
            T.copy(D, B)

    return main


def test_ops_in_helpers_reach_the_kernel_once():
    text = _program().script()
    assert text.count("T.reduce(") == 1 and text.count("T.copy(") == 2


def test_ops_in_helpers_run_on_the_cpu():
    kernel = tilelang.compile(_program(), target="cpu")
    a, b = torch.randn(4, 8), torch.zeros(4)
    kernel(a, b)
    torch.testing.assert_close(b, a.sum(1))


def test_op_in_a_helper_keeps_the_helpers_line_for_errors():
    def bad(S):
        T.gemm(S, S, S)  # a gemm of fragments: refused when lowered for CUDA

    @T.prim_func
    def main(A: T.Tensor((16, 16), T.float32)):
        with T.Kernel(1, threads=128) as bx:
            S = T.alloc_fragment((16, 16), T.float32)
            bad(S)

    with pytest.raises(Exception, match="T.gemm"):
        tilelang.compile(main, target="cuda -arch=sm_90a")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_ops_in_helpers_reach_the_cuda_source():
    src = tilelang.compile(_program(), target="cuda -arch=sm_90a").get_kernel_source()
    assert "B_ptr" in src and "A_ptr" in src
