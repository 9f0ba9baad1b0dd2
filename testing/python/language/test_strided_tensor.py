"""T.StridedTensor: kernel parameters with explicit (constant or symbolic) strides, bound from
the torch tensor's strides at call time; non-contiguous views are accepted."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError, KernelArgumentError

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def doubled_rows(stride=None, col_stride=1):
    """B = 2 * A for a (4, 8) A with row stride ``stride`` (a size variable when None)."""
    s = T.dynamic("s") if stride is None else stride

    @T.prim_func
    def main(A: T.StridedTensor[(4, 8), (s, col_stride), T.float32],
             B: T.Tensor((4, 8), T.float32)):
        with T.Kernel(1, threads=1):
            for i, j in T.grid(4, 8):
                B[i, j] = A[i, j] * 2.0

    return main


def strided_copy(block=32):
    """B[i, j] = A[i, j] for (m, 16) tensors with symbolic strides, one block per row tile."""
    m, sa, sb = T.dynamic("m"), T.dynamic("sa"), T.dynamic("sb")

    @T.prim_func
    def main(A: T.StridedTensor[(m, 16), (sa, 1), T.float16],
             B: T.StridedTensor[(m, 16), (sb, 1), T.float16]):
        with T.Kernel(T.ceildiv(m, block), threads=block) as bx:
            for r, j in T.Parallel(block, 16):
                if bx * block + r < m:
                    B[bx * block + r, j] = A[bx * block + r, j]

    return main


def test_constant_row_stride_reads_a_column_slice_on_the_cpu():
    k = tilelang.compile(doubled_rows(16), target="cpu")
    big = torch.arange(64, dtype=torch.float32).view(4, 16)
    out = torch.zeros(4, 8)
    k(big[:, 4:12], out)
    torch.testing.assert_close(out, big[:, 4:12] * 2)


def test_symbolic_row_stride_is_bound_from_each_call_on_the_cpu():
    k = tilelang.compile(doubled_rows(), out_idx=[1], target="cpu")
    for width in (8, 9, 32):
        big = torch.randn(4, width)
        torch.testing.assert_close(k(big[:, :8]), big[:, :8] * 2)
    rows = torch.randn(8, 8)[::2]  # row stride 16
    torch.testing.assert_close(k(rows), rows * 2)


def test_column_major_strides_on_the_cpu():
    k = tilelang.compile(doubled_rows(1, 4), out_idx=[1], target="cpu")
    a = torch.randn(8, 4).t()  # (4, 8) with strides (1, 4)
    assert a.stride() == (1, 4)
    torch.testing.assert_close(k(a), a * 2)


def test_two_strided_operands_with_their_own_strides_on_the_cpu():
    k = tilelang.compile(strided_copy(), target="cpu")
    a = torch.randn(40, 24, dtype=torch.float16)[:, 3:19]  # strides (24, 1)
    back = torch.zeros(40, 48, dtype=torch.float16)
    b = back[:, 8:24]
    k(a, b)
    assert torch.equal(b, a)
    assert torch.count_nonzero(back[:, :8]) == 0 and torch.count_nonzero(back[:, 24:]) == 0


def test_a_static_stride_mismatch_names_the_parameter():
    k = tilelang.compile(doubled_rows(16), target="cpu")
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' expects strides \(16, 1\), "
                                                  r"got \(8, 1\) \(stride 0 is 8"):
        k(torch.zeros(4, 8), torch.zeros(4, 8))


def test_a_shared_stride_variable_must_agree():
    s = T.dynamic("s")

    @T.prim_func
    def main(A: T.StridedTensor[(4, 8), (s, 1), T.float32],
             B: T.StridedTensor[(4, 8), (s, 1), T.float32]):
        with T.Kernel(1, threads=1):
            for i, j in T.grid(4, 8):
                B[i, j] = A[i, j]

    k = tilelang.compile(main, target="cpu")
    a = torch.randn(4, 16)[:, :8]
    b = torch.zeros(4, 12)[:, :8]
    with pytest.raises(KernelArgumentError, match=r"parameter 'B' has s = 12 in stride 0, but an "
                                                  r"earlier argument bound s = 16"):
        k(a, b)
    b = torch.zeros(4, 16)[:, :8]
    k(a, b)
    assert torch.equal(a, b)


def test_plain_tensors_still_refuse_non_contiguous_views():
    @T.prim_func
    def main(A: T.Tensor((4, 8), T.float32), B: T.Tensor((4, 8), T.float32)):
        with T.Kernel(1, threads=1):
            for i, j in T.grid(4, 8):
                B[i, j] = A[i, j]

    k = tilelang.compile(main, target="cpu")
    with pytest.raises(KernelArgumentError, match="declare it T.StridedTensor"):
        k(torch.zeros(4, 16)[:, :8], torch.zeros(4, 8))


def test_declaration_forms_and_errors():
    a = T.StridedTensor((4, 8), (16, 1), T.float16)
    b = T.StridedTensor[[4, 8], [16, 1], T.float16]
    for buf in (a, b):
        assert [int(x) for x in buf.shape] == [4, 8]
        assert [int(x) for x in buf.strides] == [16, 1]
        assert str(buf.dtype) == "float16"
    c = T.Tensor[(4, 8), T.float4_e2m1fn]
    assert str(c.dtype) == "float4_e2m1fn" and not len(c.strides)
    with pytest.raises(DSLError, match="2 dimensions .* but 1 strides"):
        T.StridedTensor((4, 8), (1,), T.float16)
    big = T.StridedTensor((2**20, 2**20), (2**21, 1), T.int8)
    assert all(str(x.ty) == "int64" for x in big.strides)  # offsets past 2**31 - 1


def test_strided_outputs_cannot_be_allocated():
    with pytest.raises(KernelArgumentError, match="output 'A' has strides"):
        tilelang.compile(doubled_rows(16), out_idx=[0], target="cpu")


def test_eager_jit_binds_const_strides_from_the_tensor():
    @tilelang.jit
    def scale(A):
        M, N, SM, SN = T.const("M, N, SM, SN")
        A: T.StridedTensor[[M, N], [SM, SN], T.float32]
        B = T.empty((M, N), T.float32)
        with T.Kernel(1, threads=1):
            for i, j in T.grid(M, N):
                B[i, j] = A[i, j] * 3.0
        return B

    base = torch.randn(6, 2, 5, 2)
    view = base[:, 0, :, 1]
    torch.testing.assert_close(scale(view), view * 3)
    func = scale.get_tir(view)
    assert [int(x) for x in func.params[0].strides] == [20, 2]
    t = base.transpose(0, 2)[:, 1, :, 0]  # other strides, same shape class: its own kernel
    torch.testing.assert_close(scale(t), t * 3)


@needs_nvcc
def test_sm90a_source_indexes_by_the_stride_parameter():
    k = tilelang.compile(strided_copy(), target="cuda -arch=sm_90a")
    src = k.get_kernel_source()
    assert "int sa, int sb)" in src  # the strides arrive as kernel arguments
    assert "* sa) +" in src and "* sb) +" in src  # and scale the row index
    assert ".entry" in k.get_ptx()


@pytest.mark.gpu
def test_strided_copy_on_the_gpu():
    k = tilelang.compile(strided_copy(), target="cuda")
    a = torch.randn(100, 64, dtype=torch.float16, device="cuda")[::3, 5:21]
    back = torch.zeros(34, 80, dtype=torch.float16, device="cuda")
    b = back[:, 40:56]
    k(a, b)
    torch.cuda.synchronize()
    assert torch.equal(b, a)
    assert torch.count_nonzero(back[:, :40]) == 0


def column_major_tiles(stages):
    """O = A for a (256, 64) column-major A (strides (1, 256)), copied through a shared tile."""
    @T.prim_func
    def main(A: T.StridedTensor((256, 64), (1, 256), "float16"), O: T.Tensor((256, 64), "float16")):
        with T.Kernel(2, threads=128) as by:
            A_s = T.alloc_shared((128, 32), "float16")
            for k in T.Pipelined(2, num_stages=stages):
                T.copy(A[by * 128, k * 32], A_s)
                T.copy(A_s, O[by * 128, k * 32])

    return main


@needs_nvcc
def test_a_column_major_tile_is_not_copied_in_row_vectors():
    # a pipelined copy moved 8 memory-adjacent halves (a column) into a row with cp.async
    src = tilelang.compile(column_major_tiles(2), target="cuda -arch=sm_90a").get_kernel_source()
    assert "cp_async_cg" not in src and "= A_ptr[" in src
    a = torch.randn(64, 256, dtype=torch.float16).t()
    assert torch.equal(tilelang.compile(column_major_tiles(2), out_idx=[1], target="cpu")(a), a)


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [0, 2])
def test_column_major_tiles_on_the_gpu(stages):
    a = torch.randn(64, 256, dtype=torch.float16, device="cuda").t()
    assert torch.equal(tilelang.compile(column_major_tiles(stages), out_idx=[1])(a), a)
