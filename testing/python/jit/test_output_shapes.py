"""Outputs the call allocates may have sizes given by integer arithmetic over size variables
bound from input tensors or integer scalars; the binder evaluates them per call."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import KernelArgumentError


@tilelang.jit
def _repeat(A):
    m = T.dynamic("m")
    A: T.Tensor[[m], T.float32]
    B = T.empty([m * 2 + 1], T.float32)
    with T.Kernel(1, threads=1):
        for i in T.serial(m * 2 + 1):
            B[i] = A[i % m] + 1.0
    return B


def _iota_kernel():
    m = T.dynamic("m")  # the name the scalar parameter m binds

    @T.prim_func
    def iota(m: T.int32, B: T.Tensor((m + 1,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(m + 1):
                B[i] = T.cast(i, T.float32)

    return tilelang.compile(iota, out_idx=[1], target="cpu")


def test_output_size_expression_over_an_input_size():
    for n in (37, 5):
        a = torch.arange(n, dtype=torch.float32)
        b = _repeat(a)
        assert b.shape == (2 * n + 1,)
        torch.testing.assert_close(b, a.repeat(3)[:2 * n + 1] + 1.0)


def test_output_size_expression_over_an_integer_scalar():
    _iota = _iota_kernel()
    torch.testing.assert_close(_iota(5), torch.arange(6, dtype=torch.float32))
    torch.testing.assert_close(_iota(0), torch.zeros(1))   # a new size on the second call
    torch.testing.assert_close(_iota(2), torch.arange(3, dtype=torch.float32))
    with pytest.raises(KernelArgumentError, match="negative size"):
        _iota(-3)


@pytest.mark.gpu
def test_output_size_expressions_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a = torch.arange(37, dtype=torch.float32, device="cuda")
    torch.testing.assert_close(_repeat(a), a.repeat(3)[:75] + 1.0)


def test_an_empty_output_along_its_last_dim_is_returned():
    # torch gives a (6, 0) tensor strides (1, 1), which TVM refused as not compact
    m, n = T.dynamic("m, n")

    @T.prim_func
    def dynamic(A: T.Tensor((m, n), "float32"), B: T.Tensor((m, n), "float32")):
        with T.Kernel(1, threads=32) as _:
            for i, j in T.grid(m, n):
                B[i, j] = A[i, j] * 2.0

    @T.prim_func
    def static(A: T.Tensor((4,), "float32"), B: T.Tensor((4, 0), "float32")):
        with T.Kernel(1, threads=32) as _:
            for i in T.serial(4):
                A[i] = 1.0

    k = tilelang.compile(dynamic, out_idx=[1], target="cpu")
    assert k(torch.zeros(6, 0)).shape == (6, 0) and k(torch.zeros(0, 8)).shape == (0, 8)
    k = tilelang.compile(static, out_idx=[1], target="cpu")
    for _ in range(2):  # the first call and the launcher's later ones
        assert k(torch.zeros(4)).shape == (4, 0)
