"""Profiler: assert_allclose catches wrong kernels; do_bench returns milliseconds."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.utils.tensor import compare


def double(N=64):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                Y[i] = X[i] * 2

    return main


@pytest.fixture(scope="module")
def profiler():
    return tilelang.compile(double(), out_idx=[1], target="cpu").get_profiler()


def test_assert_allclose_passes_for_right_reference(profiler):
    profiler.assert_allclose(lambda x: x * 2)


def test_assert_allclose_fails_for_wrong_reference(profiler):
    with pytest.raises(AssertionError, match="differ beyond"):
        profiler.assert_allclose(lambda x: x * 3)


def test_mismatch_ratio_tolerates_a_few_outliers():
    ref = torch.zeros(1000)
    out = ref.clone()
    out[:5] = 1
    compare(out, ref, atol=1e-3, rtol=0, max_mismatched_ratio=0.01)
    with pytest.raises(AssertionError):
        compare(out, ref, atol=1e-3, rtol=0, max_mismatched_ratio=0.001)


def test_do_bench_returns_positive_milliseconds(profiler):
    ms = profiler.do_bench(warmup=1, rep=5)
    assert 0 < ms < 1000
    q = profiler.do_bench(warmup=1, rep=5, quantiles=[0.5, 0.9])
    assert len(q) == 2 and q[0] <= q[1]


def test_supply_types():
    k = tilelang.compile(double(), out_idx=[1], target="cpu")
    p = k.get_profiler(tilelang.TensorSupplyType.One)
    torch.testing.assert_close(p.run_once(), torch.full((64,), 2.0))
