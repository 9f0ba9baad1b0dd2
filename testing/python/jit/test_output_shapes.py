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
