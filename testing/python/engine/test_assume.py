"""T.assume: a fact the simplifier may use; it never reaches a backend."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T


def _gather():
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), T.float32), out: T.Tensor((1,), T.float32), l: T.int32):
        with T.Kernel(1, threads=32) as _:
            T.assume(l >= 0 and l < N)
            out[0] = A[l]

    return main


def test_assume_runs_on_the_cpu():
    a, out = torch.arange(6, dtype=torch.float32), torch.zeros(1)
    tilelang.compile(_gather(), target="cpu")(a, out, 4)
    assert out.item() == 4.0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_assume_compiles_for_cuda():
    src = tilelang.compile(_gather(), target="cuda -arch=sm_90a").get_kernel_source()
    assert "assume" not in src.split("__global__", 1)[1]
