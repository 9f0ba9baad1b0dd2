"""``T.let``: the let annotation of TVMScript, and ``T.let(var, value)`` as a statement."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLTypeError


def test_let_statement_binds_a_variable_for_the_rest_of_the_scope():
    @T.prim_func
    def shifted(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(4, threads=16) as bx:
            S = T.alloc_shared((16,), "float32")
            offset = T.int32()
            T.let(offset, bx * 16)
            T.copy(A[offset], S)
            for i in T.Parallel(16):
                B[offset + i] = S[i] * 2.0

    a = torch.randn(64)
    b = tilelang.compile(shifted, out_idx=[1], target="cpu")(a)
    torch.testing.assert_close(b, a * 2)


def test_let_annotation_still_types_an_assignment():
    @T.prim_func
    def scaled(A: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=1):
            k: T.let[T.int32] = 3
            for i in T.serial(8):
                A[i] = i * k

    a = tilelang.compile(scaled, out_idx=[0], target="cpu")()
    assert a.tolist() == [3 * i for i in range(8)]


def test_let_needs_a_variable():
    with pytest.raises(DSLTypeError, match="var must be a variable"):
        T.let(3, 4)
