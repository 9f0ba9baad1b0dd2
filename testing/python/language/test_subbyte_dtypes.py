"""Sub-byte element types (T.float4_e2m1fn, T.int4, ...) in kernel parameters: the torch tensor
packs several elements per byte (uint8 / int8 / float4_e2m1fn_x2), shapes and strides are bound
in logical elements, and a scalar store changes only its own bits of the byte."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import KernelArgumentError, LoweringError

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
FP4 = T.float4_e2m1fn


def sizes_of(decl_x, decl_y=None):
    """A kernel writing its bound size/stride variables into ``out`` (CPU-runnable: no fp4
    arithmetic); ``decl_x(names) -> annotation``."""
    m, n, s = T.dynamic("m"), T.dynamic("n"), T.dynamic("s")
    if decl_y is None:
        @T.prim_func
        def main(x: decl_x(m, n, s), out: T.Tensor((3,), T.int32)):
            with T.Kernel(1, threads=1):
                out[0] = m
                out[1] = n
                out[2] = s
    else:
        @T.prim_func
        def main(x: decl_x(m, n, s), y: decl_y(m, n, s), out: T.Tensor((3,), T.int32)):
            with T.Kernel(1, threads=1):
                out[0] = m
                out[1] = n
                out[2] = s
    return main


def run_sizes(func, *args):
    k = tilelang.compile(func, target="cpu")
    out = torch.full((3,), -1, dtype=torch.int32)
    k(*args, out)
    return out.tolist()


def test_packed_shape_and_stride_binding_on_the_cpu():
    func = sizes_of(lambda m, n, s: T.StridedTensor[(m, n), (s, 1), FP4])
    t = torch.zeros(4, 8, dtype=torch.uint8)
    assert run_sizes(func, t) == [4, 16, 16]  # last dim and row stride count fp4 elements
    rows = torch.zeros(8, 12, dtype=torch.int8)[::2, :6]  # byte strides (24, 1)
    assert run_sizes(func, rows) == [4, 12, 48]
    pairs = torch.zeros(3, 5, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    assert run_sizes(func, pairs) == [3, 10, 10]


def test_size_expressions_of_two_packed_tensors_agree_on_the_cpu():
    m, n = T.dynamic("m"), T.dynamic("n")

    @T.prim_func
    def main(x: T.Tensor((m, n * 2), FP4), y: T.Tensor((m * 2, n), FP4),
             out: T.Tensor((2,), T.int32)):
        with T.Kernel(1, threads=1):
            out[0] = m
            out[1] = n

    k = tilelang.compile(main, target="cpu")
    out = torch.zeros(2, dtype=torch.int32)
    k(torch.zeros(4, 16, dtype=torch.uint8), torch.zeros(8, 8, dtype=torch.uint8), out)
    assert out.tolist() == [4, 16]  # n from y's 8 bytes = 16 fp4; x's 16 bytes = n * 2 fp4
    with pytest.raises(Exception, match="y"):  # y's rows must be 2 * m
        k(torch.zeros(4, 16, dtype=torch.uint8), torch.zeros(6, 8, dtype=torch.uint8), out)


def test_packed_argument_errors_name_the_parameter():
    m, s = T.dynamic("m"), T.dynamic("s")

    @T.prim_func
    def main(x: T.StridedTensor[(m, 16), (s, 1), FP4], out: T.Tensor((1,), T.int32)):
        with T.Kernel(1, threads=1):
            out[0] = s

    k = tilelang.compile(main, target="cpu")
    out = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(KernelArgumentError, match=r"parameter 'x' holds float4_e2m1fn "
                                                  r"elements, 2 packed per byte.*got float16"):
        k(torch.zeros(4, 8, dtype=torch.float16), out)
    with pytest.raises(KernelArgumentError, match=r"parameter 'x' expects shape \(in "
                                                  r"float4_e2m1fn elements\) \(m, 16\), got "
                                                  r"\(4, 18\).*packs 2"):
        k(torch.zeros(4, 9, dtype=torch.uint8), out)
    with pytest.raises(KernelArgumentError, match="last dimension must be contiguous"):
        k(torch.zeros(8, 4, dtype=torch.uint8).t(), out)


def test_lazy_jit_reports_the_packed_torch_dtype_instead_of_failing():
    @T.prim_func
    def main(A: T.Tensor((4, 16), FP4)):
        with T.Kernel(1, threads=1):
            T.evaluate(0)

    k = tilelang.compile(main, target="cpu")
    for dtype in (torch.uint8, torch.int8, torch.float4_e2m1fn_x2):
        k(torch.zeros(4, 8, dtype=torch.uint8).view(dtype))
    assert k.params[0].torch_dtype is torch.uint8 and k.params[0].pack == 2


def scatter(dtype=FP4):
    """dst[perm[i], k] = src[i, k]: one thread per row, scalar element moves."""
    n = T.dynamic("n")

    @T.prim_func
    def main(src: T.Tensor((n, 128), dtype), dst: T.Tensor((n, 128), dtype),
             perm: T.Tensor((n,), T.int32)):
        with T.Kernel(n, threads=32) as i:
            for k in T.serial(128):
                dst[perm[i], k] = src[i, k]

    return main


def _check_scatter(k, device):
    n = 16
    src = torch.randint(0, 256, (n, 64), dtype=torch.uint8, device=device)
    dst = torch.zeros(n, 64, dtype=torch.uint8, device=device).view(torch.int8)
    perm = torch.randperm(n, dtype=torch.int32, device=device)
    k(src, dst, perm)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n, dtype=torch.int32, device=device)
    assert torch.equal(dst.view(torch.uint8), src[inv.long()])


def test_fp4_moves_keep_both_halves_of_each_byte_on_the_cpu():
    _check_scatter(tilelang.compile(scatter(), pass_configs={"tl.disable_data_race_check": True},
                                    target="cpu"), "cpu")


def strided_store(stride0, stride1, block=8):
    """Rows of 128 fp4 scattered into a padded, strided (nb, block, 128) destination."""
    nv, nb = T.dynamic("n"), T.dynamic("nb")

    @T.prim_func
    def main(src: T.Tensor((nv, 128), FP4),
             dst: T.StridedTensor[(nb, block, 128), (stride0, stride1, 1), FP4],
             slots: T.Tensor((nv,), T.int32)):
        with T.Kernel(nv, threads=32) as i:
            for k in T.serial(128):
                dst[slots[i] // block, slots[i] % block, k] = src[i, k]

    return main


def test_static_and_symbolic_strides_store_the_same_bytes_on_the_cpu():
    block, row = 8, 68  # 64 packed bytes per row, 4 bytes padding
    results = []
    for strides in ((block * row * 2, row * 2), (T.dynamic("s0"), T.dynamic("s1"))):
        k = tilelang.compile(strided_store(*strides), target="cpu",
                             pass_configs={"tl.disable_data_race_check": True})
        torch.manual_seed(0)
        src = torch.randint(0, 256, (20, 64), dtype=torch.uint8)
        slots = torch.randperm(3 * block, dtype=torch.int32)[:20]
        back = torch.zeros(3, block * row, dtype=torch.uint8)
        dst = back.view(3, block, row)[:, :, :64]
        k(src, dst, slots)
        expected = torch.zeros_like(back).view(3, block, row)
        expected[(slots // block).long(), (slots % block).long(), :64] = src
        assert torch.equal(back.view(3, block, row), expected)
        results.append(back)
    assert torch.equal(results[0], results[1])


def test_int4_values_are_sign_extended_and_truncated_on_the_cpu():
    @T.prim_func
    def main(A: T.Tensor((2, 8), T.int4), B: T.Tensor((2, 8), T.int32),
             C: T.Tensor((2, 8), T.int4)):
        with T.Kernel(1, threads=1):
            for i, j in T.grid(2, 8):
                B[i, j] = T.Cast("int32", A[i, j]) * 10
                C[i, j] = T.Cast("int4", T.Cast("int32", A[i, j]) + 1)

    k = tilelang.compile(main, out_idx=[1, 2], target="cpu")
    vals = torch.tensor([[0, 1, 7, -8, -1, 3, -5, 2], [6, -6, 5, -7, 4, -4, -2, 1]])
    packed = ((vals[:, 0::2] & 0xF) | ((vals[:, 1::2] & 0xF) << 4)).to(torch.uint8)
    b, c = k(packed)
    assert torch.equal(b, vals.to(torch.int32) * 10)
    assert c.dtype is torch.uint8 and c.shape == (2, 4)  # the output is packed too
    lo = (c & 0xF).to(torch.int32)
    hi = (c >> 4).to(torch.int32)
    got = torch.stack([lo, hi], -1).view(2, 8)
    got = torch.where(got >= 8, got - 16, got)
    assert torch.equal(got, torch.where(vals + 1 > 7, vals + 1 - 16, vals + 1).to(torch.int32))


def test_fp4_conversion_on_the_cpu_names_the_buffer():
    @T.prim_func
    def main(A: T.Tensor((4, 16), FP4), B: T.Tensor((4, 16), T.float32)):
        with T.Kernel(1, threads=1):
            for i, j in T.grid(4, 16):
                B[i, j] = T.Cast("float32", A[i, j])

    with pytest.raises(LoweringError, match="A holds float4_e2m1fn elements.*CPU"):
        tilelang.compile(main, target="cpu")


@needs_nvcc
def test_sm90a_fp4_store_is_a_masked_byte_update():
    k = tilelang.compile(scatter(), target="cuda -arch=sm_90a",
                         pass_configs={"tl.disable_data_race_check": True})
    src = k.get_kernel_source()
    assert "((uchar*)dst_ptr)[" in src  # the byte holding the element
    assert "& (~((uchar)15 << " in src  # keeps the other half
    assert "*((__nv_fp4_e2m1*)(dst_ptr" not in src  # no whole-byte fp4 store
    assert ".entry" in k.get_ptx()


@pytest.mark.gpu
def test_fp4_moves_on_the_gpu():
    _check_scatter(tilelang.compile(scatter(), pass_configs={"tl.disable_data_race_check": True},
                                    target="cuda"), "cuda")


@pytest.mark.gpu
def test_fp4_strided_store_on_the_gpu():
    block, row = 8, 68
    k = tilelang.compile(strided_store(T.dynamic("s0"), T.dynamic("s1")), target="cuda",
                         pass_configs={"tl.disable_data_race_check": True})
    src = torch.randint(0, 256, (20, 64), dtype=torch.uint8, device="cuda")
    slots = torch.randperm(3 * block, dtype=torch.int32, device="cuda")[:20]
    back = torch.zeros(3, block * row, dtype=torch.uint8, device="cuda")
    k(src, back.view(3, block, row)[:, :, :64], slots)
    expected = torch.zeros_like(back).view(3, block, row)
    expected[(slots // block).long(), (slots % block).long(), :64] = src
    assert torch.equal(back.view(3, block, row), expected)
