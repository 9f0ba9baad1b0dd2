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


def test_register_tf32_layout_is_the_m16n8k8_a_fragment():
    """Lane l (g = l / 4, t = l % 4) holds (g, t), (g, t + 4), (g + 8, t), (g + 8, t + 4) of
    each m16 x k8 step, in registers 0..3 of the step (the PTX A fragment, a0 a2 a1 a3)."""
    import numpy as np

    from tilelang.ops.gemm import operand_layout

    lay = operand_layout(16, 16, 1, 1, "float32")
    th, rg = lay.thread_table(), lay.reg_table()
    for lane in range(32):
        g, t = divmod(lane, 4)
        for step in range(2):
            cells = [(g, 8 * step + t), (g, 8 * step + t + 4), (g + 8, 8 * step + t),
                     (g + 8, 8 * step + t + 4)]
            assert [th[c] for c in cells] == [lane] * 4
            assert [rg[c] for c in cells] == [4 * step + j for j in range(4)]
    assert np.array_equal(np.sort(rg[th == 5]), np.arange(8))


def sumsq_and_tf32_gemm(M=32, N=32, K=64, width=4):
    """example_mhc_pre's gemm kernel: row sums of squares of the tf32 register operand X,
    ``width`` columns at a time inside a serial loop, and X @ W^T."""

    @T.prim_func
    def main(X: T.Tensor((M, K), "bfloat16"), Wt: T.Tensor((N, K), "float32"),
             O: T.Tensor((M, N), "float32"), Q: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_fragment((M, N), "float32")
            part = T.alloc_fragment((M, width), "float32")
            q = T.alloc_fragment((M,), "float32")
            w_s = T.alloc_shared((N, K), "float32")
            x16 = T.alloc_fragment((M, K), "bfloat16")
            x = T.alloc_fragment((M, K), "float32")
            T.clear(acc)
            T.clear(part)
            T.copy(Wt, w_s)
            T.copy(X, x16)
            T.copy(x16, x)
            for jj in T.serial(K // width):
                for i, j in T.Parallel(M, width):
                    part[i, j] += x[i, jj * width + j] * x[i, jj * width + j]
            T.gemm(x, w_s, acc, transpose_B=True)
            T.reduce_sum(part, q, dim=1)
            T.copy(acc, O)
            T.copy(q, Q)

    return main


def test_sumsq_window_of_the_tf32_operand_on_cpu():
    x, w = torch.randn(32, 64).bfloat16(), torch.randn(32, 64)
    o, q = tilelang.compile(sumsq_and_tf32_gemm(), out_idx=[2, 3], target="cpu")(x, w)
    torch.testing.assert_close(o, x.float() @ w.T, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(q, (x.float() ** 2).sum(1), rtol=1e-4, atol=1e-4)


@NVCC
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_sumsq_window_of_the_tf32_operand_compiles(arch):
    """Columns t and t + 4 of a k8 step lie in one lane, so the 4-wide window the serial
    loop steps over is in the same threads for every jj (it steps over registers)."""
    k = tilelang.compile(sumsq_and_tf32_gemm(), out_idx=[2, 3], target=f"cuda -arch={arch}")
    assert "tl::gemm_rs<" in k.get_kernel_source()
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in k.get_ptx()


@pytest.mark.gpu
def test_sumsq_window_of_the_tf32_operand_matches_torch():
    x = torch.randn(32, 64, device="cuda").bfloat16()
    w = torch.randn(32, 64, device="cuda")
    o, q = tilelang.compile(sumsq_and_tf32_gemm(), out_idx=[2, 3], target="cuda")(x, w)
    torch.testing.assert_close(o, x.float() @ w.T, rtol=1e-2, atol=5e-2)
    torch.testing.assert_close(q, (x.float() ** 2).sum(1), rtol=1e-4, atol=1e-4)


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
