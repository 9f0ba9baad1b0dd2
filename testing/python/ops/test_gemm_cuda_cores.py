"""T.gemm on CUDA cores: gemms no tensor-core instruction takes (float64, mixed element types,
or an operand that is a slice of a larger shared tile on the mma.sync path) run as per-thread
multiply-adds instead of failing; they leave the other gemms of the kernel on wgmma."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def matmul(M, N, K, dtype, acc, bM=64, bN=64, bK=16, threads=128):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), acc)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            As = T.alloc_shared((bM, bK), dtype)
            Bs = T.alloc_shared((bN, bK), dtype)
            Cl = T.alloc_fragment((bM, bN), acc)
            T.clear(Cl)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                T.copy(A[by * bM, k * bK], As)
                T.copy(B[bx * bN, k * bK], Bs)
                T.gemm(As, Bs, Cl, transpose_B=True)
            T.copy(Cl, C[by * bM, bx * bN])

    return main


def split_k(M=64, N=32, K=96, head=64, threads=256):
    """C1 = Q[:, :head] @ KV.T on wgmma where it can, and C2 = P.T @ Q[:, :head], whose M of 32
    no wgmma takes and whose B is a slice: that one runs on CUDA cores."""

    @T.prim_func
    def main(Q: T.Tensor((M, K), T.bfloat16), KV: T.Tensor((N, head), T.bfloat16),
             P: T.Tensor((M, N), T.bfloat16), C1: T.Tensor((M, N), T.float32),
             C2: T.Tensor((N, head), T.float32)):
        with T.Kernel(1, threads=threads):
            Qs = T.alloc_shared((M, K), T.bfloat16)
            KVs = T.alloc_shared((N, head), T.bfloat16)
            Ps = T.alloc_shared((M, N), T.bfloat16)
            c1 = T.alloc_fragment((M, N), T.float32)
            c2 = T.alloc_fragment((N, head), T.float32)
            T.copy(Q, Qs)
            T.copy(KV, KVs)
            T.copy(P, Ps)
            T.gemm(Qs[:, :head], KVs, c1, transpose_B=True, clear_accum=True)
            T.gemm(Ps, Qs[:, :head], c2, transpose_A=True, clear_accum=True)
            T.copy(c1, C1)
            T.copy(c2, C2)

    return main


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_float64_gemm_compiles_to_fma(arch):
    ptx = tilelang.compile(matmul(128, 128, 64, "float64", "float64"),
                           target=f"cuda -arch={arch}").get_ptx()
    assert "fma.rn.f64" in ptx and "mma" not in ptx


@needs_nvcc
def test_a_sliced_operand_keeps_the_other_gemm_on_wgmma():
    ptx = tilelang.compile(split_k(), target="cuda -arch=sm_90a").get_ptx()
    assert "wgmma.mma_async" in ptx and "fma.rn.f32" in ptx
    ptx80 = tilelang.compile(split_k(), target="cuda -arch=sm_80").get_ptx()
    assert "mma.sync" not in ptx80 and "fma.rn.f32" in ptx80  # both slices: CUDA cores


def test_the_plan_is_recorded():
    import tvm
    import tvm_ffi
    from tvm import tirx

    from tilelang.ops.base import decode
    from tilelang.ops.gemm import Gemm, SimtPlan, decode_plan
    from tilelang.transform import LayoutInference

    from tilelang.engine.target import resolve

    mod = tirx.transform.BindTarget(resolve("cuda -arch=sm_80"))(
        tvm.IRModule({"main": matmul(128, 128, 64, "float64", "float64")}))
    gemms = []
    tvm_ffi.structural_walk(LayoutInference()(mod)["main"].body, (tirx.Evaluate, lambda e:
                            gemms.append(decode(e)) if isinstance(decode(e), Gemm) else None))
    assert [decode_plan(g.plan) for g in gemms] == [SimtPlan(4)]


@pytest.mark.gpu
def test_float64_gemm_on_the_gpu():
    a = torch.randn(128, 64, dtype=torch.float64, device="cuda")
    b = torch.randn(96, 64, dtype=torch.float64, device="cuda")
    c = torch.empty(128, 96, dtype=torch.float64, device="cuda")
    tilelang.compile(matmul(128, 96, 64, "float64", "float64", bN=32), target="cuda")(a, b, c)
    torch.testing.assert_close(c, a @ b.T)


@pytest.mark.gpu
def test_sliced_operand_gemms_on_the_gpu():
    q = torch.randn(64, 96, device="cuda").bfloat16()
    kv = torch.randn(32, 64, device="cuda").bfloat16()
    p = torch.randn(64, 32, device="cuda").bfloat16()
    c1 = torch.empty(64, 32, device="cuda")
    c2 = torch.empty(32, 64, device="cuda")
    tilelang.compile(split_k(), target="cuda")(q, kv, p, c1, c2)
    torch.testing.assert_close(c1, q[:, :64].float() @ kv.float().T, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(c2, p.float().T @ q[:, :64].float(), atol=1e-2, rtol=1e-2)
