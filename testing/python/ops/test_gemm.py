"""T.gemm on the CPU backend in all transpose combinations, tile-multiple and ragged sizes."""

import pytest
import torch

import tilelang
import tilelang.language as T
from programs import matmul


def reference(a, b, tA, tB):
    a = a.float().T if tA else a.float()
    b = b.float().T if tB else b.float()
    return a @ b


@pytest.mark.parametrize("tA,tB", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("M,N,K", [(128, 128, 64), (257, 129, 65)])
def test_gemm_fp32_transposes(M, N, K, tA, tB):
    k = tilelang.compile(matmul(M, N, K, 64, 64, 32, tA, tB, "float32", num_stages=2), out_idx=[2], target="cpu")
    a = torch.randn(*((K, M) if tA else (M, K)))
    b = torch.randn(*((N, K) if tB else (K, N)))
    torch.testing.assert_close(k(a, b), reference(a, b, tA, tB), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("tA,tB", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_low_precision_accumulates_in_fp32(dtype, tA, tB):
    M, N, K = 257, 129, 65
    k = tilelang.compile(matmul(M, N, K, 64, 64, 32, tA, tB, dtype, out_dtype="float32", num_stages=2),
                         out_idx=[2], target="cpu")
    tdt = getattr(torch, dtype)
    a = torch.randn(*((K, M) if tA else (M, K))).to(tdt)
    b = torch.randn(*((N, K) if tB else (K, N))).to(tdt)
    torch.testing.assert_close(k(a, b), reference(a, b, tA, tB), rtol=1e-2, atol=1e-2)


def test_gemm_clear_accum():
    @T.prim_func
    def main(A: T.Tensor((16, 8), "float32"), B: T.Tensor((8, 16), "float32"),
             C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32) as bx:
            C_f = T.alloc_fragment((16, 16), "float32")
            T.fill(C_f, 100.0)
            T.gemm(A, B, C_f, clear_accum=True)
            T.copy(C_f, C)

    k = tilelang.compile(main, out_idx=[2], target="cpu")
    a, b = torch.randn(16, 8), torch.randn(8, 16)
    torch.testing.assert_close(k(a, b), a @ b, rtol=1e-4, atol=1e-4)
