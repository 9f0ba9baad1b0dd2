"""T.im2col: the im2col tile of an NHWC image, so that a convolution is a GEMM (checked against
torch's conv2d on the CPU backend and on the GPU), and T.Tensor(shape, dtype, X.data) as a view
of X, as the public convolution examples flatten their filter and output."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def conv(N, C, H, W, F, K, S, D, P, bM=64, bN=32, bK=32, stages=2, threads=128):
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1

    @T.prim_func
    def main(data: T.Tensor((N, H, W, C), T.float16), kernel: T.Tensor((K, K, C, F), T.float16),
             out: T.Tensor((N, OH, OW, F), T.float16)):
        with T.Kernel(T.ceildiv(F, bN), T.ceildiv(N * OH * OW, bM), threads=threads) as (bx, by):
            data_shared = T.alloc_shared((bM, bK), T.float16)
            kernel_shared = T.alloc_shared((bK, bN), T.float16)
            acc = T.alloc_fragment((bM, bN), T.float32)
            kernel_flat = T.Tensor((K * K * C, F), T.float16, kernel.data)
            out_flat = T.Tensor((N * OH * OW, F), T.float16, out.data)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K * K * C, bK), num_stages=stages):
                T.im2col(data, data_shared, by, k, K, S, D, P)
                T.copy(kernel_flat[k * bK, bx * bN], kernel_shared)
                T.gemm(data_shared, kernel_shared, acc)
            T.copy(acc, out_flat[by * bM, bx * bN])

    return main


def reference(a, b, S, D, P):
    out = torch.nn.functional.conv2d(a.float().permute(0, 3, 1, 2), b.float().permute(3, 2, 0, 1),
                                     stride=S, padding=P, dilation=D)
    return out.permute(0, 2, 3, 1)


SHAPES = [(2, 16, 10, 9, 32, 3, 1, 1, 1), (1, 8, 11, 7, 32, 3, 2, 1, 0),
          (2, 16, 9, 9, 64, 3, 1, 2, 2), (1, 24, 6, 5, 32, 1, 1, 1, 0)]


@pytest.mark.parametrize("shape", SHAPES)
def test_convolution_as_im2col_gemm_on_the_cpu(shape):
    N, C, H, W, F, K, S, D, P = shape
    a, b = torch.randn(N, H, W, C).half(), torch.randn(K, K, C, F).half()
    out = tilelang.compile(conv(*shape), out_idx=-1, target="cpu")(a, b)
    torch.testing.assert_close(out.float(), reference(a, b, S, D, P), atol=2e-2, rtol=2e-2)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_convolution_compiles_for_cuda(arch):
    ptx = tilelang.compile(conv(*SHAPES[0]), out_idx=-1, target=f"cuda -arch={arch}").get_ptx()
    assert "mma" in ptx


def test_im2col_arguments_are_checked():
    with pytest.raises(DSLError, match="stride must be an int >= 1"):
        @T.prim_func
        def bad(img: T.Tensor((1, 4, 4, 8), T.float16)):
            with T.Kernel(1, threads=32):
                col = T.alloc_shared((16, 16), T.float16)
                T.im2col(img, col, 0, 0, 3, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
def test_convolution_as_im2col_gemm_on_the_gpu(shape):
    N, C, H, W, F, K, S, D, P = shape
    a = torch.randn(N, H, W, C, device="cuda").half()
    b = torch.randn(K, K, C, F, device="cuda").half()
    out = tilelang.compile(conv(*shape, stages=3), out_idx=-1, target="cuda")(a, b)
    torch.testing.assert_close(out.float(), reference(a, b, S, D, P), atol=2e-2, rtol=2e-2)
