"""tilelang.tools.Analyzer counts a program's gemm FLOPs and global-memory bytes from its IR."""

import pytest

import tilelang.language as T
from tilelang.carver.arch import CUDA
from tilelang.errors import TileLangError
from tilelang.tools import Analyzer


def _gemm(M, N, K, bm=64, bn=64, bk=32):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bn, bk), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[bx * bn, k * bk], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def test_flops_and_bytes_of_a_tiled_gemm():
    M, N, K = 256, 128, 512
    r = Analyzer.analysis(_gemm(M, N, K), CUDA("cuda -arch=sm_90a"))
    assert r.total_flops == 2 * M * N * K
    blocks = (M // 64) * (N // 64)
    loads = blocks * (K // 32) * (64 * 32 + 64 * 32) * 2  # A and B tiles, fp16
    assert r.total_global_bytes == loads + M * N * 2
    assert r.arithmetic_intensity == pytest.approx(r.total_flops / r.total_global_bytes)


def test_symbolic_sizes_are_refused():
    n = T.dynamic("n")
    with pytest.raises(TileLangError, match="non-constant extent"):
        Analyzer.analysis(_gemm(n, 128, 64))


def test_arch_description():
    assert CUDA("cuda -arch=sm_90a").compute_capability == "90a"
