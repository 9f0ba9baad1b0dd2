"""The public surface of ``@tilelang.autotune`` functions: ``.compile(...)`` (the fastest
kernel; an eager function takes ``T.const`` sizes by name), ``.get_tir``, and over an eager
``@tilelang.jit`` function a call that runs the fastest kernel and returns its outputs."""

import pytest
import torch
from tvm import tirx

import tilelang
import tilelang.language as T


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "cache"))


def _eager_row_sum():
    @tilelang.autotune(configs=[{"block_M": 4}, {"block_M": 8}], warmup=1, rep=3,
                       ref_prog=lambda a: a.sum(dim=1))
    @tilelang.jit(target="cpu")
    def row_sum(a, block_M=16, threads=32):
        M, N = T.const("M, N")
        a: T.Tensor((M, N), T.float32)
        o = T.empty((M,), T.float32)
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            acc = T.alloc_fragment((block_M,), T.float32)
            T.clear(acc)
            for i, j in T.Parallel(block_M, N):
                acc[i] += a[bx * block_M + i, j]
            T.copy(acc, o[bx * block_M])
        return o

    return row_sum


def test_compile_by_sizes_tunes_an_eager_function():
    row_sum = _eager_row_sum()
    kernel = row_sum.compile(M=32, N=16)
    assert kernel.config["block_M"] in (4, 8) and kernel.latency > 0
    assert row_sum.compile(M=32, N=16) is kernel
    a = torch.randn(32, 16)
    torch.testing.assert_close(kernel(a), a.sum(dim=1))


def test_compile_with_the_tuned_parameters_given_compiles_them():
    row_sum = _eager_row_sum()
    kernel = row_sum.compile(M=32, N=16, block_M=8)
    assert not hasattr(kernel, "latency")
    a = torch.randn(32, 16)
    torch.testing.assert_close(kernel(a), a.sum(dim=1))


def test_calling_an_eager_autotuned_function_returns_its_outputs():
    row_sum = _eager_row_sum()
    a = torch.randn(24, 8)
    torch.testing.assert_close(row_sum(a), a.sum(dim=1))
    torch.testing.assert_close(row_sum(a, block_M=4), a.sum(dim=1))


def test_get_tir_builds_the_program():
    row_sum = _eager_row_sum()
    func = row_sum.get_tir(M=32, N=16, block_M=8)
    assert isinstance(func, tirx.PrimFunc)
    assert [int(s) for s in func.params[0].shape] == [32, 16]


def test_compile_of_a_prim_func_builder_is_its_call():
    def scale(M, block_M=16):
        @T.prim_func
        def main(X: T.Tensor((M,), "float32"), Y: T.Tensor((M,), "float32")):
            with T.Kernel(T.ceildiv(M, block_M), threads=32) as bx:
                for i in T.Parallel(block_M):
                    Y[bx * block_M + i] = X[bx * block_M + i] * 3.0

        return main

    @tilelang.autotune(configs=[{"block_M": 8}, {"block_M": 16}], warmup=1, rep=3,
                       ref_prog=lambda x: x * 3)
    @tilelang.jit(out_idx=[-1], target="cpu")
    def build(M, block_M=16):
        return scale(M, block_M)

    kernel = build.compile(64)
    assert build(64) is kernel and kernel.config["block_M"] in (8, 16)
    assert isinstance(build.get_tir(64, block_M=8), tirx.PrimFunc)
    x = torch.randn(64)
    torch.testing.assert_close(kernel(x), x * 3)
