"""T.transpose: dst = src.T for 2-D shared tiles (CPU numerics, sm_90a lowering, GPU run)."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def transpose_kernel(M, N, bM, bN, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            t = T.alloc_shared((bM, bN), dtype)
            tt = T.alloc_shared((bN, bM), dtype)
            T.copy(A[by * bM:(by + 1) * bM, bx * bN:(bx + 1) * bN], t)
            T.transpose(t, tt)
            T.copy(tt, B[bx * bN:(bx + 1) * bN, by * bM:(by + 1) * bM])

    return main


def test_transpose_cpu():
    a = torch.randn(64, 96).half()
    b = tilelang.compile(transpose_kernel(64, 96, 32, 48), out_idx=[1], target="cpu")(a)
    torch.testing.assert_close(b, a.T.contiguous())


def test_transpose_shape_error():
    with pytest.raises(DSLError, match="needs a 2-D destination of shape"):
        @T.prim_func
        def main(A: T.Tensor((8, 16), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((8, 16), "float32")
                T.transpose(s, T.alloc_shared((8, 16), "float32"))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_transpose_sm90a_compiles():
    k = tilelang.compile(transpose_kernel(128, 128, 64, 64), out_idx=[1],
                         target="cuda -arch=sm_90a")
    k.get_ptx()
    assert "__syncthreads()" in k.get_kernel_source()


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,bM,bN", [(128, 128, 64, 64), (256, 128, 128, 64)])
def test_transpose_gpu(M, N, bM, bN):
    a = torch.randn(M, N, device="cuda").half()
    b = tilelang.compile(transpose_kernel(M, N, bM, bN), out_idx=[1], target="cuda")(a)
    torch.testing.assert_close(b, a.T.contiguous())
