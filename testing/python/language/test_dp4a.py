"""``T.dp4a(A, B, C)``: ``C += dot(A[0:4], B[0:4])`` over signed int8 in int32 (it used to be
TVM's value-returning intrinsic, dropped as a statement: the accumulator never changed);
other dtypes are a ``ValueError``."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLTypeError

SM90 = "cuda -arch=sm_90a"


def dot_kernel(n=16, whole_buffers=False):
    @T.prim_func
    def main(A: T.Tensor((n,), "int8"), B: T.Tensor((n,), "int8"), C: T.Tensor((2,), "int32")):
        with T.Kernel(1, threads=1):
            a = T.alloc_local((n,), "int8")
            b = T.alloc_local((n,), "int8")
            acc = T.alloc_local((1,), "int32")
            for i in T.serial(n):
                a[i] = A[i]
                b[i] = B[i]
            acc[0] = 7
            for k in T.serial(n // 4):
                T.dp4a(a[k * 4], b[k * 4], acc[0])
            C[0] = acc[0]
            C[1] = 0
            if whole_buffers:
                T.dp4a(A, B, C[1:2])  # the first four elements of each

    return main


def _inputs(n=16, device="cpu"):
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (n,), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (n,), dtype=torch.int8, generator=g)
    return a.to(device), b.to(device)


def _expected(a, b):
    return torch.stack([7 + (a.int() * b.int()).sum(), (a[:4].int() * b[:4].int()).sum()]).int()


@pytest.mark.parametrize("whole", [False, True])
def test_dp4a_accumulates_cpu(whole):
    k = tilelang.compile(dot_kernel(whole_buffers=whole), out_idx=[2], target="cpu")
    a, b = _inputs()
    want = _expected(a, b)
    if not whole:
        want[1] = 0
    torch.testing.assert_close(k(a, b), want)


def test_dp4a_extremes_cpu():
    # -128 * -128 * 4 = 65536 does not fit 16 bits: the sum is int32
    k = tilelang.compile(dot_kernel(4), out_idx=[2], target="cpu")
    a = torch.full((4,), -128, dtype=torch.int8)
    torch.testing.assert_close(k(a, a), torch.tensor([7 + 65536, 0], dtype=torch.int32))


def test_dp4a_compiles_for_sm90():
    src = tilelang.compile(dot_kernel(), out_idx=[2], target=SM90).get_kernel_source()
    body = src[src.index('extern "C"'):]
    assert "acc_ptr[0] = " in body and "(int)a_ptr" in body, body


@pytest.mark.parametrize("dtypes", [("float16", "float16", "int32"), ("int8", "int8", "float32"),
                                    ("uint8", "uint8", "int32"), ("int8", "float16", "int32"),
                                    ("int8", "int8", "int64")])
def test_dp4a_rejects_other_dtypes(dtypes):
    a_dt, b_dt, c_dt = dtypes
    with pytest.raises(ValueError, match="T.dp4a requires signed int8 inputs") as info:

        @T.prim_func
        def main(A: T.Tensor((4,), a_dt), B: T.Tensor((4,), b_dt), C: T.Tensor((1,), c_dt)):
            with T.Kernel(1, threads=1):
                T.dp4a(A, B, C)

    assert isinstance(info.value, DSLTypeError)
    assert f"got A {a_dt}, B {b_dt}, C {c_dt}" in str(info.value)


@pytest.mark.gpu
def test_dp4a_gpu():
    k = tilelang.compile(dot_kernel(whole_buffers=True), out_idx=[2], target="cuda")
    a, b = _inputs(device="cuda")
    torch.testing.assert_close(k(a, b), _expected(a, b).cuda())
