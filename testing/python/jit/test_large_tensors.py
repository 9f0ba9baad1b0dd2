"""Tensors past 2**31 elements: 64-bit offsets for such buffers, and call-time refusal of sizes
that a kernel's size variables cannot hold."""

import gc

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError, KernelArgumentError

M, N = 65538, 32768  # 2**31 + 65536 int8 elements


@T.prim_func
def static_tail(A: T.Tensor((M, N), "int8"), B: T.Tensor((2, 32), "int8"), row: T.int32):
    with T.Kernel(2, threads=32) as bx:
        t = T.alloc_shared((1, 32), "int8")
        T.copy(A[row + bx, N - 32], t)
        for j in T.Parallel(32):
            B[bx, j] = t[0, j] + 1


def dynamic_tail(dtype):
    n = T.dynamic("n", dtype)

    @T.prim_func
    def main(A: T.Tensor((n,), "int8"), B: T.Tensor((32,), "int8")):
        with T.Kernel(1, threads=32) as _:
            for i in T.Parallel(32):
                B[i] = A[n - 32 + i] + 1

    return main


def rows(dtype):
    m = T.dynamic("m", dtype)

    @T.prim_func
    def main(A: T.Tensor((m, 1024), "int8"), B: T.Tensor((1024,), "int8")):
        with T.Kernel(1, threads=32) as _:
            for j in T.Parallel(1024):
                B[j] = A[m - 1, j]

    return main


def test_static_tensor_past_int32_elements_on_cpu():
    k = tilelang.compile(static_tail, target="cpu")
    a = torch.empty(M, N, dtype=torch.int8)  # 2 GiB, untouched except the tail
    a[-2:, -32:] = torch.arange(64, dtype=torch.int8).reshape(2, 32)
    b = torch.zeros(2, 32, dtype=torch.int8)
    k(a, b, M - 2)
    expected = a[-2:, -32:] + 1
    del a
    gc.collect()
    assert torch.equal(b, expected)


def test_static_tensor_past_int32_elements_has_64bit_cuda_offsets():
    k = tilelang.compile(static_tail, target="cuda -arch=sm_80")
    loads = [line for line in k.get_kernel_source().splitlines() if "A_ptr +" in line]
    assert loads and all("(int64_t)row" in line and "(int64_t)32768" in line for line in loads)


def test_small_static_tensor_keeps_32bit_offsets():
    @T.prim_func
    def small(A: T.Tensor((64, 32), "int8"), B: T.Tensor((2, 32), "int8"), row: T.int32):
        with T.Kernel(2, threads=32) as bx:
            for j in T.Parallel(32):
                B[bx, j] = A[row + bx, j]

    src = tilelang.compile(small, target="cuda -arch=sm_80").get_kernel_source()
    assert "int64_t)row" not in src


def test_int64_size_variable_past_int32_elements():
    k = tilelang.compile(dynamic_tail("int64"), out_idx=[1], target="cpu")
    a = torch.empty(2**31 + 5, dtype=torch.int8)
    a[-32:] = torch.arange(32, dtype=torch.int8)
    b = k(a)
    expected = a[-32:] + 1
    del a
    gc.collect()
    assert torch.equal(b, expected)


def test_int64_size_variable_small_kernel():
    n = T.dynamic("n", "int64")

    @T.prim_func
    def add_one(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < n:
                    B[bx * 32 + i] = A[bx * 32 + i] + 1

    k = tilelang.compile(add_one, out_idx=[1], target="cpu")
    a = torch.randn(100)
    torch.testing.assert_close(k(a), a + 1)


@pytest.mark.parametrize("size", [2**31 + 5, 2**32 + 5])
def test_int32_size_variable_refuses_sizes_it_cannot_hold(size):
    k = tilelang.compile(dynamic_tail("int32"), out_idx=[1], target="cpu")
    a = torch.zeros(1, dtype=torch.int8).expand(size)  # no memory behind it
    with pytest.raises(KernelArgumentError, match=rf"parameter 'A' has n = {size} in dim 0, which "
                       r"does not fit n's type int32 \(at most 2147483647\); declare it "
                       r'T.dynamic\("n", "int64"\)'):
        k(a)


def test_int32_sizes_refuse_tensors_past_int32_elements():
    k = tilelang.compile(rows("int32"), out_idx=[1], target="cpu")
    a = torch.zeros(1, 1, dtype=torch.int8).expand(2**21 + 1, 1024)
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' has 2147484672 elements, more "
                       r"than its 32-bit index arithmetic can address"):
        k(a)


def test_size_variable_dtype_is_checked():
    with pytest.raises(DSLError, match=r"T.dynamic\('n'\): a size has dtype int32 or int64"):
        T.dynamic("n", "float32")
