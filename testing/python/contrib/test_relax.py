"""Tile programs called from a Relax graph, built and run by the Relax VM on the CPU."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tilelang
import tilelang.contrib.relax as tl_relax
import tilelang.language as T


def add_one(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            x = T.alloc_fragment((32,), "float32")
            T.copy(A[bx * 32], x)
            for i in T.Parallel(32):
                x[i] = x[i] + 1
            T.copy(x, B[bx * 32])

    return main


def test_two_kernel_calls_in_a_relax_function():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((100,), "float32"))
    with bb.function("main", [x]):
        y = tl_relax.call_kernel(bb, add_one(100), [x], name="add_one")
        z = bb.emit(relax.call_tir(bb.get().get_global_var("add_one"), [y],
                                   relax.TensorType((100,), "float32")))
        bb.emit_func_output(z)
    ex = tl_relax.build(bb.get(), target="cpu")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    a = np.random.randn(100).astype("float32")
    out = vm["main"](tvm.runtime.tensor(a))
    np.testing.assert_allclose(out.numpy(), a + 2, rtol=1e-6)


def test_unnamed_one_input_kernels_in_a_dataflow_block():
    # a one-input call in a dataflow block failed in Relax's reshape rewriting (no root block),
    # and an unnamed kernel kept the symbol main, the Relax function's too
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((64,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = tl_relax.call_kernel(bb, add_one(64), [x])
            z = bb.emit_output(tl_relax.call_kernel(bb, add_one(64), [y]))
        bb.emit_func_output(z)
    vm = relax.VirtualMachine(tl_relax.build(bb.get(), target="cpu"), tvm.cpu())
    a = np.random.randn(64).astype("float32")
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(a)).numpy(), a + 2, rtol=1e-6)


def test_arity_is_checked():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((100,), "float32"))
    with bb.function("main", [x]):
        with pytest.raises(tilelang.TileLangError, match="has 2 parameters"):
            tl_relax.call_kernel(bb, add_one(100), [x, x])
        bb.emit_func_output(x)
