"""Keyword arguments of the public TileLang that are scheduling hints here (annotations,
prefer_async) are accepted without changing results; those we cannot honour are refused by
name."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def test_hints_are_accepted_and_keep_results():
    @T.prim_func
    def main(A: T.Tensor((64, 32), T.float32), B: T.Tensor((64, 32), T.float32)):
        with T.Kernel(1, threads=128) as bx:
            S = T.alloc_shared((64, 32), T.float32)
            T.copy(A, S, annotations={"prefer_instruction": "tma"}, prefer_async=True)
            for i, j in T.Parallel(64, 32, prefer_async=True, annotations={"any": True}):
                S[i, j] = S[i, j] * 2
            F = T.alloc_fragment((64,), T.float32)
            for i in T.Parallel(64):
                F[i] = S[i, 0]
            T.cumsum(F, annotations={"note": "scan"})
            for i, j in T.Parallel(64, 32):
                B[i, j] = S[i, j] + F[i]

    kernel = tilelang.compile(main, out_idx=[1], target="cpu")
    a = torch.randn(64, 32)
    torch.testing.assert_close(kernel(a), 2 * a + (2 * a[:, 0]).cumsum(0)[:, None])


def test_loop_layout_and_gemm_mbar_are_refused_by_name():
    with pytest.raises(DSLError, match="loop_layout"):
        T.Parallel(4, loop_layout=object())
    with pytest.raises(DSLError, match="annotations must be a dict"):
        T.Parallel(4, annotations=["x"])
    with pytest.raises(DSLError, match="mbar"):
        @T.prim_func
        def main(A: T.Tensor((64, 64), T.float16), C: T.Tensor((64, 64), T.float32)):
            with T.Kernel(1, threads=128) as bx:
                S = T.alloc_shared((64, 64), T.float16)
                F = T.alloc_fragment((64, 64), T.float32)
                T.gemm(S, S, F, mbar=S)
