"""T.gemm with a float32 fragment as the A operand runs as tf32 mma.sync (m16n8k8) on CUDA, A
rounded to tf32 from its registers as the shared path rounds it; the CPU computes in fp32."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError

NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def register_a_gemm(M, N, K, threads=128, transpose_B=False, a_dtype="float32",
                    policy=T.GemmWarpPolicy.Square):
    """C = A @ op(B) with A loaded into a fragment and B in shared memory (mhc_pre's shape)."""
    b_shape = (N, K) if transpose_B else (K, N)

    @T.prim_func
    def main(A: T.Tensor((M, K), a_dtype), B: T.Tensor(b_shape, a_dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            A_f = T.alloc_fragment((M, K), a_dtype)
            B_s = T.alloc_shared(b_shape, a_dtype)
            C_f = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_f)
            T.copy(B, B_s)
            T.clear(C_f)
            T.gemm(A_f, B_s, C_f, transpose_B=transpose_B, policy=policy)
            T.copy(C_f, C)

    return main


CASES = [  # M, N, K, threads, transpose_B
    (32, 32, 256, 128, True),    # example_mhc_pre: 32 tokens x 32 mixes, K-major fn
    (64, 64, 32, 128, False),    # 2 x 2 warps: A replicated over the column warps
    (64, 48, 16, 128, True),     # 4 x 1 warps, odd number of n8 tiles
]


@pytest.mark.parametrize("M,N,K,threads,tB", CASES)
def test_register_tf32_gemm_on_cpu_matches_torch(M, N, K, threads, tB):
    a = torch.randn(M, K)
    b = torch.randn(N, K) if tB else torch.randn(K, N)
    c = tilelang.compile(register_a_gemm(M, N, K, threads, tB), out_idx=[2], target="cpu")(a, b)
    torch.testing.assert_close(c, a @ (b.T if tB else b), rtol=1e-4, atol=1e-4)


@NVCC
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("M,N,K,threads,tB", CASES)
def test_register_tf32_gemm_is_mma_m16n8k8(arch, M, N, K, threads, tB):
    k = tilelang.compile(register_a_gemm(M, N, K, threads, tB), out_idx=[2],
                         target=f"cuda -arch={arch}")
    assert "tl::gemm_rs<" in k.get_kernel_source()
    ptx = k.get_ptx()
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    assert "cvt.rna.tf32.f32" in ptx and ".local" not in ptx


def test_int8_register_operand_is_refused_by_name():
    @T.prim_func
    def main(A: T.Tensor((32, 64), "int8"), B: T.Tensor((64, 32), "int8"),
             C: T.Tensor((32, 32), "int32")):
        with T.Kernel(1, threads=128) as bx:
            A_f = T.alloc_fragment((32, 64), "int8")
            B_s = T.alloc_shared((64, 32), "int8")
            C_f = T.alloc_fragment((32, 32), "int32")
            T.copy(A, A_f)
            T.copy(B, B_s)
            T.clear(C_f)
            T.gemm(A_f, B_s, C_f)
            T.copy(C_f, C)

    with pytest.raises(LoweringError, match=r"register A operand \(A_f\) must be float16, "
                                            r"bfloat16 or float32 \(tf32\).*got int8"):
        tilelang.lower(main, target="cuda -arch=sm_80")


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,threads,tB", CASES)
def test_register_tf32_gemm_matches_torch(M, N, K, threads, tB):
    a = torch.randn(M, K, device="cuda")
    b = torch.randn(N, K, device="cuda") if tB else torch.randn(K, N, device="cuda")
    c = tilelang.compile(register_a_gemm(M, N, K, threads, tB), out_idx=[2], target="cuda")(a, b)
    ref = a.double() @ (b.double().T if tB else b.double())
    # tf32 keeps 10 mantissa bits: about 1e-3 relative per product
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=2e-2 * K ** 0.5)


@NVCC
def test_shared_tf32_gemm_is_wgmma_when_k_major_else_mma_sync():
    import re

    from programs import matmul

    def instrs(tB):
        f = matmul(256, 256, 256, 128, 128, 32, False, tB, dtype="float32", num_stages=2)
        ptx = tilelang.compile(f, out_idx=[2], target="cuda -arch=sm_90a").get_ptx()
        return set(re.findall(r"(?:wgmma\.mma_async|mma\.sync)\.\S+", ptx))

    assert instrs(True) == {"wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32"}
    assert instrs(False) == {"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"}
