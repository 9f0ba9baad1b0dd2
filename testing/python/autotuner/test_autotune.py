"""@tilelang.autotune over @tilelang.jit: the fastest working configuration wins."""

import pytest
import torch

import tilelang
import tilelang.language as T


def scale(M, N, block_M=16, factor=2.0):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=32) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            T.copy(X[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * factor
            T.copy(x, Y[bx * block_M, 0])

    return main


def test_picks_a_working_config_and_reports_it():
    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 32}], warmup=1, rep=3,
                       ref_prog=lambda x: x * 2)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, block_M=16):
        return scale(M, N, block_M)

    k = build(64, 16)
    assert k.config["block_M"] in (8, 32) and k.latency > 0
    assert build(64, 16) is k
    x = torch.randn(64, 16)
    torch.testing.assert_close(k(x), x * 2)


def test_wrong_configs_are_skipped():
    @tilelang.autotune(configs=lambda M, N: [{"factor": 3.0}, {"factor": 2.0}], warmup=1, rep=3,
                       ref_prog=lambda x: x * 2)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, factor=2.0):
        return scale(M, N, 16, factor)

    k = build(32, 8)
    assert k.config == {"factor": 2.0}
    assert len(k.autotune_failures) == 1 and "differ" in k.autotune_failures[0][1]


def test_no_working_config_raises():
    @tilelang.autotune(configs=[{"factor": 5.0}], warmup=1, rep=3, ref_prog=lambda x: x * 2)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, N, factor=2.0):
        return scale(M, N, 16, factor)

    with pytest.raises(tilelang.TileLangError, match="no working configuration"):
        build(32, 8)
