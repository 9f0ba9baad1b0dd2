"""A ``T.Parallel`` loop inside a serial loop may index a fragment by the serial variable:
``x[i, kk * W + j]`` with ``j`` over ``W`` reads an aligned window of the row.  When every
window lies in the same threads (the fragment's digits above the window are registers), the
loop takes the window's layout and ``kk`` steps over registers; when the holding thread
changes with ``kk``, no partition works and the error says so."""

import numpy as np
import pytest
import torch
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError
from tilelang.layout import codec
from tilelang.layout.fragment import elementwise
from tilelang.ops.gemm import operand_layout
from tilelang.transform import LayoutInference

from cuda_helpers import SM80
from helpers import bind

M, K, N = 32, 64, 32


def sumsq_and_gemm(width, dtype="float16"):
    """Row sums of squares of X, taken ``width`` columns at a time from the register A
    operand of a gemm, and X @ W^T."""

    @T.prim_func
    def main(X: T.Tensor((M, K), dtype), Wt: T.Tensor((N, K), dtype),
             O: T.Tensor((M, N), T.float32), Q: T.Tensor((M,), T.float32)):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_fragment((M, N), T.float32)
            part = T.alloc_fragment((M, width), T.float32)
            q = T.alloc_fragment((M,), T.float32)
            xs = T.alloc_shared((M, K), dtype)
            ws = T.alloc_shared((N, K), dtype)
            xf = T.alloc_fragment((M, K), dtype)
            T.clear(acc)
            T.clear(part)
            T.copy(X, xs)
            T.copy(Wt, ws)
            T.copy(xs, xf)
            for kk in T.serial(K // width):
                for i, j in T.Parallel(M, width):
                    part[i, j] += xf[i, kk * width + j] * xf[i, kk * width + j]
            T.gemm(xf, ws, acc, transpose_B=True)
            T.reduce_sum(part, q, dim=1)
            T.copy(acc, O)
            T.copy(q, Q)

    return main


def test_window_of_a_register_operand():
    a = operand_layout(M, K, 2, 2)
    w = a.window(1, 8)
    assert w is not None and w.shape == [M, 8] and w.num_regs * 8 == a.num_regs
    full, win = a.thread_table(), w.thread_table()
    for kk in range(K // 8):
        np.testing.assert_array_equal(full[:, kk * 8:(kk + 1) * 8], win)
    assert a.window(1, 4) is None  # column pairs 0-1 and 4-5 lie in different threads


def test_window_keeps_registers_dense():
    lay = elementwise([16, 64], 4, vec=4)  # per row: 4 x (4 threads x 4 registers)
    w = lay.window(1, 32)  # splits the register digit above the threads
    assert w is not None and w.num_regs * 2 == lay.num_regs
    assert sorted(np.unique(w.reg_table()).tolist()) == list(range(w.num_regs))
    np.testing.assert_array_equal(w.thread_table(), lay.thread_table()[:, 32:])
    assert lay.window(1, 8) is None  # 8 columns span half of the row's threads



def test_the_loop_takes_the_window_layout():
    mod = LayoutInference()(bind(sumsq_and_gemm(8), SM80))
    loops = []
    tvm_ffi.structural_walk(mod["main"].body, (tirx.For, lambda f: loops.append(f)
                                                if "tl.loop_layout" in f.annotations else None))
    [lay] = [codec.decode(f.annotations["tl.loop_layout"]) for f in loops
             if list(codec.decode(f.annotations["tl.loop_layout"]).shape) == [M, 8]]
    assert lay.same_as(operand_layout(M, K, 2, 2).window(1, 8))


@pytest.mark.parametrize("target", ["cuda -arch=sm_80", "cuda -arch=sm_90a"])
def test_lowers_for_cuda(target):
    tilelang.lower(sumsq_and_gemm(8), target=target, stage="tile")


def test_a_window_spread_over_threads_names_the_serial_loop():
    with pytest.raises(LoweringError, match=r"xf\[i, kk \* 4 \+ j\](.|\n)*changes with kk"
                                            r"(.|\n)*8 along dim 1"):
        tilelang.lower(sumsq_and_gemm(4), target="cuda -arch=sm_90a", stage="tile")


@pytest.mark.parametrize("width", [4, 8])
def test_cpu_matches_torch(width):
    kernel = tilelang.compile(sumsq_and_gemm(width, "float32"), out_idx=[2, 3], target="cpu")
    x, w = torch.randn(M, K), torch.randn(N, K)
    o, q = kernel(x, w)
    torch.testing.assert_close(o, x @ w.T, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(q, (x * x).sum(dim=1), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("width", [8, 16])
def test_gpu_matches_torch(width):
    kernel = tilelang.compile(sumsq_and_gemm(width), out_idx=[2, 3], target="cuda")
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(N, K, device="cuda", dtype=torch.float16)
    o, q = kernel(x, w)
    torch.testing.assert_close(o, x.float() @ w.float().T, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(q, (x.float() ** 2).sum(dim=1), rtol=1e-2, atol=1e-2)
