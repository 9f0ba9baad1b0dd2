"""Region extents are simplified where regions are built (``tilelang.ops.region``): a slice
``X[h0:h1]`` whose bounds differ by a constant, also through the defining values of kernel
scalars (``h1 = h0 + 64``), spans that constant for every consumer (the CUDA lowerings need
it); an extent that really is symbolic where a constant is needed is a ``LoweringError``."""

import pytest
import torch
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError, LoweringError
from tilelang.ops import decode
from tilelang.ops import region as R

SM90 = "cuda -arch=sm_90a"


def _head_block_kernel():
    """Each block scales 64 heads; the head range is held in two kernel scalars."""

    @T.prim_func
    def main(X: T.Tensor((2, 128, 64), T.float32), Y: T.Tensor((2, 128, 32), T.float32)):
        with T.Kernel(2, 2, threads=128) as (bx, b):
            S = T.alloc_shared((64, 64), T.float32)
            F = T.alloc_fragment((64, 32), T.float32)
            H0 = bx * 64
            H1 = H0 + 64
            T.copy(X[b, H0:H1, :32], S[:, :32])
            T.copy(S[:, :32], F)
            for i, j in T.Parallel(64, 32):
                F[i, j] = F[i, j] * 2.0
            T.copy(F, Y[b, H0:H1, :])

    return main


def _op_regions(func):
    out = []

    def visit(s):
        op = decode(s)
        if op is not None:
            out.extend(v for v in vars(op).values() if R.is_region(v))

    tvm_ffi.structural_walk(func.body, (tirx.Evaluate, visit))
    return out


def test_extents_between_scalar_bounds_are_constants():
    regions = _op_regions(_head_block_kernel())
    assert regions
    for r in regions:
        assert all(isinstance(x.extent, tirx.IntImm) for x in r.region), R.describe(r)


def test_scalar_bounds_lower_for_cuda():
    tilelang.lower(_head_block_kernel(), target=SM90, stage="tile")


def test_scalar_bounds_on_the_cpu_match_torch():
    kernel = tilelang.compile(_head_block_kernel(), target="cpu")
    x, y = torch.randn(2, 128, 64), torch.zeros(2, 128, 32)
    kernel(x, y)
    torch.testing.assert_close(y, 2 * x[:, :, :32])


def test_eager_scalar_bounds_lower_for_cuda_and_run_on_the_cpu():
    @tilelang.jit
    def scale(X, heads=128, dim=32):
        X: T.Tensor((2, heads, dim), T.float32)
        Y = T.empty((2, heads, dim), T.float32)
        with T.Kernel(heads // 64, 2, threads=128) as (bx, b):
            S = T.alloc_shared((64, 2 * dim), T.float32)
            F = T.alloc_fragment((64, dim), T.float32)
            H0 = bx * 64
            H1 = H0 + 64
            T.copy(X[b, H0:H1, :], S[:, dim:])
            T.copy(S[:, dim:], F)
            for i, j in T.Parallel(64, dim):
                F[i, j] = F[i, j] + 1.0
            T.copy(F, Y[b, H0:H1, :])
        return Y

    x = torch.randn(2, 128, 32)
    tilelang.lower(scale.get_tir(x), target=SM90, stage="tile")
    torch.testing.assert_close(scale(x), x + 1)


def test_a_reassigned_scalar_cannot_make_an_extent_constant():
    with pytest.raises(DSLError, match="H1 is assigned 2 times"):
        @T.prim_func
        def main(X: T.Tensor((256,), T.float32), Y: T.Tensor((256,), T.float32)):
            with T.Kernel(4, threads=128) as bx:
                H0 = bx * 64
                H1 = H0 + 64
                T.copy(X[H0:H1], Y[H0:H1])
                H1 = H1 + 1


def test_a_symbolic_parallel_extent_names_the_loop():
    @T.prim_func
    def main(A: T.Tensor((256,), T.float32), B: T.Tensor((256,), T.float32),
             L: T.Tensor((5,), T.int32)):
        with T.Kernel(4, threads=128) as bx:
            s = L[bx]
            e = L[bx + 1]
            for i in T.Parallel(e - s):
                B[s + i] = A[s + i]

    with pytest.raises(LoweringError, match=r"extent e - s is not a constant(.|\n)*"
                                            r"for i in T.Parallel\(e - s\)"):
        tilelang.lower(main, target=SM90, stage="tile")
