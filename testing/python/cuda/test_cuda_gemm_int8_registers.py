"""T.gemm with an int8 fragment as the A operand (s8 x s8 -> s32, the public w4a8 dequantize
gemm) runs as mma.sync m16n8k32 from registers on CUDA (sm_80 and sm_90a, where wgmma has no
int8 register operand): the fragment is laid out as the instruction's A fragment, lane l
holding bytes 4(l%4) .. +3 and 16 + 4(l%4) .. +3 of rows l/4 and l/4 + 8 of each k32 step."""

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError
from tilelang.ops.gemm import operand_layout

NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def int8_register_gemm(M, N, K, threads=128, transpose_B=True):
    """Ct = A @ op(B) with A loaded into an int8 fragment (through a shifted copy, as the
    dequantize kernel produces its operand) and B in shared memory."""
    b_shape = (N, K) if transpose_B else (K, N)

    @T.prim_func
    def main(A: T.Tensor((M, K), "int8"), B: T.Tensor(b_shape, "int8"),
             C: T.Tensor((M, N), "int32")):
        with T.Kernel(1, threads=threads) as bx:
            a_f = T.alloc_fragment((M, K), "int8")
            a_reg = T.alloc_fragment((M, K), "int8")
            b_s = T.alloc_shared(b_shape, "int8")
            c_f = T.alloc_fragment((M, N), "int32")
            T.copy(A, a_f)
            for i, k in T.Parallel(M, K):
                a_reg[i, k] = a_f[i, k] - 1
            T.copy(B, b_s)
            T.clear(c_f)
            T.gemm(a_reg, b_s, c_f, transpose_B=transpose_B)
            T.copy(c_f, C)

    return main


CASES = [  # M, N, K, threads, transpose_B
    (64, 64, 64, 128, True),    # 2 x 2 warps: A replicated over the column warps
    (128, 32, 32, 128, True),   # 4 x 1 warps, one k32 step
    (32, 48, 64, 128, False),   # B (K, N): gathered B fragments, odd number of n8 tiles
]


def _ref(a, b, tB):
    return (a.long() - 1) @ (b.long().T if tB else b.long())


def test_int8_operand_layout_is_the_m16n8k32_a_fragment():
    lay = operand_layout(16, 64, 1, 1, "int8")
    th, rg = lay.thread_table(), lay.reg_table()
    for lane in range(32):
        g, t = divmod(lane, 4)
        for step in range(2):
            for word, (row, col) in enumerate([(g, 4 * t), (g + 8, 4 * t), (g, 16 + 4 * t),
                                                (g + 8, 16 + 4 * t)]):
                for byte in range(4):
                    cell = (row, 32 * step + col + byte)
                    assert th[cell] == lane
                    assert rg[cell] == 16 * step + 4 * word + byte
    assert np.array_equal(np.sort(rg[th == 7]), np.arange(32))


def test_int8_operand_k_not_a_multiple_of_32_is_refused():
    with pytest.raises(LoweringError, match=r"K = 16 must be a multiple of 32 for a int8"):
        tilelang.lower(int8_register_gemm(32, 32, 16), target="cuda -arch=sm_80")


@pytest.mark.parametrize("M,N,K,threads,tB", CASES)
def test_int8_register_gemm_on_cpu_matches_torch(M, N, K, threads, tB):
    a = torch.randint(-127, 128, (M, K), dtype=torch.int8)
    b = torch.randint(-128, 128, (N, K) if tB else (K, N), dtype=torch.int8)
    c = tilelang.compile(int8_register_gemm(M, N, K, threads, tB), out_idx=[2],
                         target="cpu")(a, b)
    assert torch.equal(c.long(), _ref(a, b, tB))


@NVCC
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("M,N,K,threads,tB", CASES)
def test_int8_register_gemm_is_mma_m16n8k32(arch, M, N, K, threads, tB):
    k = tilelang.compile(int8_register_gemm(M, N, K, threads, tB), out_idx=[2],
                         target=f"cuda -arch={arch}")
    assert "tl::gemm_rs<" in k.get_kernel_source()
    ptx = k.get_ptx()
    assert "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" in ptx
    assert "wgmma" not in ptx and ".local" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,threads,tB", CASES)
def test_int8_register_gemm_matches_torch(M, N, K, threads, tB):
    a = torch.randint(-127, 128, (M, K), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (N, K) if tB else (K, N), dtype=torch.int8, device="cuda")
    c = tilelang.compile(int8_register_gemm(M, N, K, threads, tB), out_idx=[2],
                         target="cuda")(a, b)
    assert torch.equal(c.long().cpu(), _ref(a.cpu(), b.cpu(), tB))
