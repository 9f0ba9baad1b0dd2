"""Language names of the public TileLang: T.dynamic with several names, T.clamp,
T.sync_threads, the fast-math spellings and the reductions' batch / nan_propagate."""

import pytest
import torch
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def test_dynamic_with_several_names_gives_several_sizes():
    m, n = T.dynamic("m, n")
    assert (m.name, n.name) == ("m", "n")
    assert T.dynamic("k").name == "k"
    with pytest.raises(DSLError, match="identifiers"):
        T.dynamic("m, 2n")

    @T.prim_func
    def main(A: T.Tensor((m, n), T.float32), B: T.Tensor((m, n), T.float32)):
        with T.Kernel(m, threads=32) as bx:
            for j in T.serial(n):
                B[bx, j] = T.clamp(A[bx, j], -0.5, 0.5)

    kernel = tilelang.compile(main, target="cpu")
    a, b = torch.randn(5, 7), torch.empty(5, 7)
    kernel(a, b)
    torch.testing.assert_close(b, a.clamp(-0.5, 0.5))


def test_fast_math_spellings_compute_the_function():
    @T.prim_func
    def main(A: T.Tensor((16,), T.float32), B: T.Tensor((16,), T.float32)):
        with T.Kernel(1, threads=16) as bx:
            for i in T.Parallel(16):
                B[i] = T.__exp(A[i]) + T.__log2(T.abs(A[i]) + 1) + T.__sin(A[i])

    kernel = tilelang.compile(main, out_idx=[1], target="cpu")
    a = torch.randn(16)
    torch.testing.assert_close(kernel(a), a.exp() + (a.abs() + 1).log2() + a.sin())


def test_sync_threads_is_a_block_barrier():
    @T.prim_func
    def main(A: T.Tensor((64,), T.float32), B: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64) as bx:
            S = T.alloc_shared((64,), T.float32)
            tx = T.get_thread_binding()
            S[tx] = A[tx]
            T.sync_threads()
            B[tx] = S[63 - tx]

    assert "__syncthreads()" in tilelang.lower(main, target="cuda -arch=sm_80").kernel_source

    @T.prim_func
    def parallel(A: T.Tensor((64,), T.float32), B: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((64,), T.float32)
            for i in T.Parallel(64):
                S[i] = A[i] * 2
            T.sync_threads()  # the CPU build failed: LLVM codegen has no tvm_storage_sync
            for i in T.Parallel(64):
                B[i] = S[63 - i] + 1

    a = torch.randn(64)
    got = tilelang.compile(parallel, out_idx=[1], target="cpu")(a)
    torch.testing.assert_close(got, (a * 2).flip(0) + 1)
    with pytest.raises(DSLError, match="only valid inside a T.Kernel"):
        T.sync_threads(1, 128)  # the named form needs the block's size (test_named_barrier.py)


def _row_max(batch=1, nan_propagate=False):
    @T.prim_func
    def main(A: T.Tensor((8, 32), T.float32), B: T.Tensor((8,), T.float32)):
        with T.Kernel(1, threads=32) as bx:
            f = T.alloc_fragment((8, 32), T.float32)
            r = T.alloc_fragment((8,), T.float32)
            T.copy(A, f)
            T.reduce_max(f, r, dim=1, batch=batch, nan_propagate=nan_propagate)
            T.copy(r, B)

    return main


def test_reduce_batch_is_a_hint():
    kernel = tilelang.compile(_row_max(batch=4), out_idx=[1], target="cpu")
    a = torch.randn(8, 32)
    torch.testing.assert_close(kernel(a), a.amax(dim=1))
    # (nan_propagate=True: testing/python/ops/test_reduce_nan.py)
    with pytest.raises(DSLError, match="batch must be a positive int"):
        _row_max(batch=0)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool", "float8_e4m3fn"])
def test_fast_math_spellings_refuse_non_float_inputs(dtype):
    with pytest.raises(TypeError, match=rf"T\.__exp only supports floating-point inputs, but got {dtype}"):
        T.__exp(tirx.Var("v", dtype))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_fast_math_spellings_keep_the_float_dtype(dtype):
    result = T.__log2(tirx.Var("v", dtype))
    assert isinstance(result, tirx.Call) and result.dtype == dtype


def test_clamp_keywords_and_align_up():
    @T.prim_func
    def main(A: T.Tensor((8,), T.int32), B: T.Tensor((8,), T.int32), C: T.Tensor((8,), T.int32)):
        with T.Kernel(1, threads=8) as bx:
            for i in T.Parallel(8):
                B[i] = T.clamp(A[i], min_val=-2, max_val=3)
                C[i] = T.align_up(A[i], 4)

    kernel = tilelang.compile(main, target="cpu")
    a = torch.arange(-4, 12, 2, dtype=torch.int32)
    b, c = torch.zeros_like(a), torch.zeros_like(a)
    kernel(a, b, c)
    torch.testing.assert_close(b, a.clamp(-2, 3))
    torch.testing.assert_close(c, (a + 3).div(4, rounding_mode="floor") * 4)
