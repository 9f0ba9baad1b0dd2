"""tilelang.tools.Analyzer counts a program's gemm FLOPs and global-memory bytes from its IR."""

import pytest

import tilelang.language as T
from tilelang.carver.arch import CUDA
from tilelang.errors import TileLangError
from tilelang.tools import Analyzer
from programs import matmul


def _gemm(M, N, K):
    return matmul(M, N, K, 64, 64, 32, tB=True, num_stages=2)


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
