"""T.gemm on the CPU backend in all transpose combinations, tile-multiple and ragged sizes."""

import shutil

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


@pytest.mark.parametrize("tA,tB", [(False, False), (False, True), (True, False)])
def test_gemm_f16_accumulator_on_the_cpu(tA, tB):
    M, N, K = 128, 64, 64
    k = tilelang.compile(matmul(M, N, K, 64, 64, 32, tA, tB, "float16", accum="float16"),
                         out_idx=[2], target="cpu")
    a = (torch.randn(*((K, M) if tA else (M, K))) / 4).half()
    b = (torch.randn(*((N, K) if tB else (K, N))) / 4).half()
    torch.testing.assert_close(k(a, b).float(), reference(a, b, tA, tB), rtol=2e-2, atol=2e-2)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_gemm_f16_accumulator_is_an_f16_mma(arch):
    """f16 accumulators (the public f16f16f16 gemms) run mma.sync with f16 C/D registers; wgmma
    is only chosen for f32 accumulators."""
    k = tilelang.compile(matmul(128, 128, 64, 64, 64, 32, dtype="float16", accum="float16"),
                         out_idx=[2], target=f"cuda -arch={arch}")
    ptx = k.get_ptx()
    assert "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16" in ptx
    assert "wgmma" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("tA,tB", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_f16_accumulator_on_the_gpu(tA, tB):
    M, N, K = 257, 129, 96
    k = tilelang.compile(matmul(M, N, K, 64, 64, 32, tA, tB, "float16", accum="float16"),
                         out_idx=[2], target="cuda")
    a = (torch.randn(*((K, M) if tA else (M, K))) / 4).half().cuda()
    b = (torch.randn(*((N, K) if tB else (K, N))) / 4).half().cuda()
    torch.testing.assert_close(k(a, b).float().cpu(), reference(a, b, tA, tB).cpu(),
                               rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("target", ["cuda -arch=sm_80", "cuda -arch=sm_90a"])
def test_a_local_accumulator_is_refused_on_cuda(target):
    # sm_90a's wgmma path took it as a fragment: every thread then stored its whole 64x64 copy
    from tilelang.errors import LoweringError

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 32), "float16")
            b = T.alloc_shared((32, 64), "float16")
            Cl = T.alloc_local((64, 64), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.clear(Cl)
            T.gemm(a, b, Cl)
            T.copy(Cl, C)

    with pytest.raises(LoweringError, match=r"accumulator C \(Cl\) in a fragment"):
        tilelang.lower(main, target=target)
