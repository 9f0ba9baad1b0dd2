"""T.reshape / T.view of a fragment on CUDA: the view is the fragment's registers, laid out by
the fragment's layout regrouped into the view's dims (each element keeps its thread and
register).  Where the layout's digits cannot be regrouped, or the view changes the element
size, the lowering refuses by name."""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError
from tilelang.layout.fragment import elementwise, mma_accumulator, wgmma_accumulator

SM90 = "cuda -arch=sm_90a"


def _same_elements(a, b):
    """Both layouts put the i-th element (row-major) in the same thread and register."""
    return (np.array_equal(a.thread_table().reshape(-1), b.thread_table().reshape(-1)) and
            np.array_equal(a.reg_table().reshape(-1), b.reg_table().reshape(-1)))


@pytest.mark.parametrize("lay, shape", [
    (wgmma_accumulator(256, 128, 1, 4), (256, 2, 64)),
    (mma_accumulator(64, 64, 2, 2), (64, 4, 16)),
    (mma_accumulator(64, 64, 2, 2), (4096,)),
    (elementwise([6, 32], 128), (3, 64)),  # padding in the outermost dim only
    (elementwise([2, 384], 128, vec=2, pad=False), (2, 3, 128)),
])
def test_reshaped_layout_keeps_threads_and_registers(lay, shape):
    view = lay.reshaped(shape)
    assert list(view.shape) == list(shape)
    assert _same_elements(lay, view)
    assert view.reshaped(lay.shape).same_as(lay)


def test_reshape_refused_where_digits_do_not_regroup():
    assert elementwise([6, 32], 128).reshaped((2, 96)) is None  # 6 = 2 x 3 over 8 threads
    assert elementwise([2, 384], 128, vec=4).reshaped((2, 3, 128)) is None  # 384 padded to 512


def test_permuted_layout_is_the_transpose():
    lay = mma_accumulator(64, 32, 2, 2)
    t = lay.permuted([1, 0])
    np.testing.assert_array_equal(t.thread_table(), lay.thread_table().T)
    np.testing.assert_array_equal(t.reg_table(), lay.reg_table().T)


def group_sums(rows=16, groups=4, width=16, threads=128):
    """Y[i, g] = sum over the g-th ``width`` columns of 2 * X[i, :] (the scaling done through
    the view), and Z = the scaled X read back through the fragment itself."""
    cols = groups * width

    @T.prim_func
    def main(X: T.Tensor((rows, cols), T.float32), Y: T.Tensor((rows, groups), T.float32),
             Z: T.Tensor((rows, cols), T.float32)):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment((rows, cols), T.float32)
            y = T.alloc_fragment((rows, groups), T.float32)
            T.copy(X, x)
            xv = T.reshape(x, (rows, groups, width))
            for i, g, k in T.Parallel(rows, groups, width):
                xv[i, g, k] = xv[i, g, k] * 2
            T.reduce_sum(xv, y, dim=2)
            T.copy(y, Y)
            T.copy(x, Z)

    return main


def gemm_then_view(M=64, N=64, K=32, heads=16):
    """The shape of the public fp8 indexer: a gemm accumulator seen as (M, N/heads, heads),
    scaled and reduced over heads through the view, written out transposed."""
    groups = N // heads

    @T.prim_func
    def main(A: T.Tensor((M, K), T.float16), B: T.Tensor((N, K), T.float16),
             W: T.Tensor((groups, heads), T.float32), O: T.Tensor((groups, M), T.float32)):
        with T.Kernel(1, threads=128) as bx:
            a_s = T.alloc_shared((M, K), T.float16)
            b_s = T.alloc_shared((N, K), T.float16)
            acc = T.alloc_fragment((M, N), T.float32)
            accv = T.reshape(acc, (M, groups, heads))
            w = T.alloc_fragment((groups, heads), T.float32)
            out = T.alloc_fragment((M, groups), T.float32)
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.copy(W, w)
            T.gemm(a_s, b_s, acc, transpose_B=True, clear_accum=True)
            for i, g, h in T.Parallel(M, groups, heads):
                accv[i, g, h] = T.max(accv[i, g, h], 0) * w[g, h]
            T.reduce_sum(accv, out, dim=-1)
            for g, i in T.Parallel(groups, M):
                O[g, i] = out[i, g]

    return main


def _gemm_then_view_ref(a, b, w):
    s = torch.relu(a.float() @ b.float().T)
    M, N = s.shape
    g, h = w.shape
    return (s.reshape(M, g, h) * w).sum(-1).T


def test_cpu_group_sums():
    x = torch.randn(16, 64)
    y, z = tilelang.compile(group_sums(), out_idx=[1, 2], target="cpu")(x)
    torch.testing.assert_close(y, (2 * x).reshape(16, 4, 16).sum(-1))
    torch.testing.assert_close(z, 2 * x)


def test_cpu_gemm_then_view():
    a, b, w = torch.randn(64, 32), torch.randn(64, 32), torch.randn(4, 16)
    o = tilelang.compile(gemm_then_view(), out_idx=[3], target="cpu")(a.half(), b.half(), w)
    torch.testing.assert_close(o, _gemm_then_view_ref(a.half(), b.half(), w), rtol=1e-3,
                               atol=1e-3)


@pytest.mark.parametrize("program", [group_sums, gemm_then_view])
@pytest.mark.parametrize("target", [SM90, "cuda -arch=sm_80"])
def test_view_of_a_fragment_compiles_for_cuda(program, target):
    src = tilelang.compile(program(), target=target).get_kernel_source()
    # the view is the fragment's own registers: no second array is declared for it
    assert "xv" not in src and "accv" not in src


def test_the_view_uses_the_fragments_registers():
    """Through the view, each thread scales the elements its registers hold: the loop over
    the view is partitioned by the fragment's layout, register for register (128 threads x
    8 registers hold the 16 x 64 tile)."""
    text = tilelang.lower(group_sums(), target=SM90, stage="tile").script()
    assert "xv" not in text
    assert "for r in T.unroll(8" in text
    assert "x[r % 8] = x[r % 8] * T.float32(2.0)" in text


def test_view_as_another_type_of_the_same_size_is_the_same_registers():
    # (was: a TVM internal check, "Buffer V is used before its definition")
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float32"), B: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=128) as _:
            F = T.alloc_fragment((16, 16), "float32")
            T.copy(A, F)
            V = T.view(F, dtype="int32")
            for i, j in T.Parallel(16, 16):
                V[i, j] = V[i, j] ^ 1
            T.copy(F, B)

    src = tilelang.compile(main, target=SM90).get_kernel_source()
    assert "((int*)F_ptr)[0] = (((int*)F_ptr)[0] ^ 1);" in src
    a = torch.randn(16, 16)
    out = tilelang.compile(main, out_idx=[1], target="cpu")(a)
    assert torch.equal(out, (a.view(torch.int32) ^ 1).view(torch.float32))


def test_view_changing_the_element_size_is_refused():
    @T.prim_func
    def main(X: T.Tensor((16, 64), T.float32), Y: T.Tensor((16, 128), T.float16)):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((16, 64), T.float32)
            T.copy(X, x)
            T.copy(T.view(x, dtype=T.float16), Y)

    with pytest.raises(LoweringError, match=r"T.view of the fragment x as float16"):
        tilelang.lower(main, target=SM90)


def test_view_whose_dims_split_threads_unevenly_is_refused():
    @T.prim_func
    def main(X: T.Tensor((6, 32), T.float32), Y: T.Tensor((2, 3), T.float32)):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((6, 32), T.float32)
            y = T.alloc_fragment((2, 3), T.float32)
            for i, j in T.Parallel(6, 32):  # the loop (and so x) gets a padded layout
                x[i, j] = X[i, j]
            xv = T.reshape(x, (2, 3, 32))
            T.reduce_sum(xv, y, dim=2)
            T.copy(y, Y)

    with pytest.raises(LoweringError, match=r"are views of the same fragment"):
        tilelang.lower(main, target=SM90)


@pytest.mark.gpu
def test_gpu_group_sums():
    x = torch.randn(16, 64, device="cuda")
    y, z = tilelang.compile(group_sums(), out_idx=[1, 2], target="cuda")(x)
    torch.testing.assert_close(y, (2 * x).reshape(16, 4, 16).sum(-1))
    torch.testing.assert_close(z, 2 * x)


@pytest.mark.gpu
def test_gpu_gemm_then_view():
    a = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    w = torch.randn(4, 16, device="cuda")
    o = tilelang.compile(gemm_then_view(), out_idx=[3], target="cuda")(a, b, w)
    torch.testing.assert_close(o, _gemm_then_view_ref(a, b, w), rtol=1e-2, atol=1e-2)
