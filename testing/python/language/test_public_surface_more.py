"""More of the public TileLang's language surface: T.Layout / T.Fragment are the tile
layouts, expr.dtype, T.access_ptr, T.call_extern with dtype=, T.import_source."""

import logging

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError
from tilelang.layout import Fragment, Layout
from tvm import tirx

TWICE = """
template <typename A, typename B>
__device__ void twice_of(A *a, B *b, int n) { for (int i = 0; i < n; ++i) b[i] = a[i] * 2; }
"""


def test_layout_and_fragment_are_the_tile_layouts():
    assert T.Layout is Layout and T.Fragment is Fragment
    lay = T.Layout((4, 8), lambda i, j: [j, i])
    assert [int(x) for x in lay.map(1, 2)] == [2, 1]


def test_layout_of_a_global_tensor_keeps_values_and_warns(caplog):
    @T.prim_func
    def main(A: T.Tensor((8, 8), T.float32), B: T.Tensor((8, 8), T.float32)):
        with T.Kernel(1, threads=64) as bx:
            T.annotate_layout({A: T.Layout(A.shape, lambda i, j: [j, i])})
            T.copy(A, B)

    with caplog.at_level(logging.WARNING, logger="tilelang"):
        kernel = tilelang.compile(main, out_idx=[1], target="cpu")
    assert "layout of global tensor A is not applied" in caplog.text
    a = torch.randn(8, 8)
    torch.testing.assert_close(kernel(a), a)


def test_scalar_expressions_have_a_dtype():
    buf = tirx.decl_buffer((4,), "uint8")
    x = tirx.BufferLoad(buf, [tirx.const(0, "int32")])
    assert x.dtype == T.uint8 and x.dtype.bits == 8
    assert (x.astype("int32") + 1).dtype == "int32"
    assert tirx.Var("n", "int64").dtype == T.int64
    assert buf.dtype == "uint8"  # buffers keep theirs


def _extern_kernel(dtype_kw: bool):
    @T.prim_func
    def main(A: T.Tensor((128, 4), T.float32), B: T.Tensor((128, 4), T.float32)):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_local((8,), T.float32)
            b = T.alloc_local((8,), T.float32)
            T.import_source(TWICE)
            tx = T.get_thread_binding()
            for i in T.vectorized(4):
                a[i + 4] = A[tx, i]
            if dtype_kw:
                T.call_extern("twice_of", T.access_ptr(a[4], "r"), T.access_ptr(b, "w", 4), 4,
                              dtype=T.float32)
            else:
                T.call_extern("float32", "twice_of", T.access_ptr(a[4:8], "r"),
                              T.access_ptr(b, "w"), 4)
            for i in T.vectorized(4):
                B[tx, i] = b[i]

    return main


@pytest.mark.parametrize("dtype_kw", [True, False])
def test_import_source_and_access_ptr_reach_the_cuda_source(dtype_kw):
    src = tilelang.lower(_extern_kernel(dtype_kw), target="cuda -arch=sm_90a").kernel_source
    assert "__device__ void twice_of" in src
    assert src.index("__device__ void twice_of") < src.index("__global__")
    assert "twice_of((&(a_ptr[4])), (&(b_ptr[0])), 4);" in src


def test_import_source_inside_a_pipelined_loop_keeps_the_loop():
    @T.macro
    def twice_in_place(S, k):
        T.import_source(TWICE)
        a = T.alloc_local((4,), T.float32)
        b = T.alloc_local((4,), T.float32)
        for i in T.vectorized(4):
            a[i] = S[k, i]
        T.call_extern("float32", "twice_of", T.access_ptr(a, "r"), T.access_ptr(b, "w"), 4)
        for i in T.vectorized(4):
            S[k, i] = b[i]

    @T.prim_func
    def main(A: T.Tensor((8, 4), T.float32), B: T.Tensor((8, 4), T.float32)):
        with T.Kernel(1, threads=32) as bx:
            S = T.alloc_shared((8, 4), T.float32)
            T.copy(A, S)
            for k in T.Pipelined(8, num_stages=1):
                twice_in_place(S, k)
            T.copy(S, B)

    src = tilelang.lower(main, target="cuda -arch=sm_90a").kernel_source
    assert src.count("__device__ void twice_of") == 1
    body = src[src.index("__global__"):]
    assert "for (int k = 0; k < 8; ++k)" in body and "twice_of(" in body


def test_access_ptr_offsets_and_extents():
    buf = tirx.decl_buffer((4, 8), "float32", name="X")
    elem = tirx.BufferLoad(buf, [tirx.const(1, "int32"), tirx.const(2, "int32")])
    ptr = T.access_ptr(elem, "rw")
    assert int(ptr.args[2]) == 10 and int(ptr.args[3]) == 22 and int(ptr.args[4]) == 3
    ptr = T.access_ptr(buf, "w", 5, offset=2)
    assert int(ptr.args[2]) == 2 and int(ptr.args[3]) == 5 and int(ptr.args[4]) == 2
    with pytest.raises(DSLError, match="access_type"):
        T.access_ptr(buf, "x")


@pytest.mark.gpu
def test_import_source_runs_on_the_gpu():
    kernel = tilelang.compile(_extern_kernel(True), out_idx=[1], target="cuda")
    a = torch.randn(128, 4, device="cuda")
    torch.testing.assert_close(kernel(a), 2 * a)
