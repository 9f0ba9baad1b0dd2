"""The eager @tilelang.jit style: sizes from T.const, tensors typed in the body, T.empty
outputs, .compile / .get_tir / .par_compile; the returning-a-prim_func style still works."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError, KernelArgumentError
from tilelang.jit import _JITFunction
from tilelang.jit.eager import EagerJITFunction


@tilelang.jit
def scale_add(A, B, alpha: float = 2.0, block: int = 32):
    M, N = T.const("M, N")
    dtype = T.float32
    A: T.Tensor((M, N), dtype)
    B: T.Tensor((M, N), dtype)
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(M, block), threads=32) as bx:
        for i, j in T.Parallel(block, N):
            if bx * block + i < M:
                C[bx * block + i, j] = A[bx * block + i, j] * alpha + B[bx * block + i, j]
    return C


@T.macro
def copy_rows(A):
    M, N = A.shape
    out = T.empty(M, N, dtype=A.dtype)
    with T.Kernel(T.ceildiv(M, 16), threads=32) as bx:
        for i, j in T.Parallel(16, N):
            if bx * 16 + i < M:
                out[bx * 16 + i, j] = A[bx * 16 + i, j]
    return out


@tilelang.jit
def copy_static(A: T.Tensor[[48, 8], T.float32]):
    return copy_rows(A)


@tilelang.jit
def copy_dynamic_rows(A):
    N = T.dynamic("N")
    M = T.const("M")
    A: T.Tensor[[N, M], T.float32]
    return copy_rows(A)


@tilelang.jit
def double_into(A, C):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    C: T.Tensor((N,), T.float32)
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(N):
            C[i] = A[i] * 2


def test_style_is_detected():
    assert isinstance(scale_add, EagerJITFunction) and scale_add.__name__ == "scale_add"
    assert scale_add.tensor_params == ["A", "B"]

    @tilelang.jit(out_idx=[1])
    def legacy(n):
        @T.prim_func
        def main(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(n):
                    B[i] = A[i]

        return main

    assert isinstance(legacy, _JITFunction)
    a = torch.randn(16)
    assert torch.equal(legacy(16)(a), a)
    assert torch.equal(legacy.compile(16)(a), a)
    assert legacy.get_tir(16).params[0].name == "A"
    assert len(legacy.par_compile([(8,), {"n": 16}])) == 2


def test_call_binds_sizes_from_tensors_and_returns_outputs():
    a, b = torch.randn(70, 8), torch.randn(70, 8)
    torch.testing.assert_close(scale_add(a, b), a * 2 + b)
    torch.testing.assert_close(scale_add(a, b, alpha=3.0), a * 3 + b)
    a2, b2 = torch.randn(16, 4), torch.randn(16, 4)
    torch.testing.assert_close(scale_add(a2, b2), a2 * 2 + b2)
    assert len(scale_add._kernel_cache) == 3  # one per (alpha, sizes)
    scale_add(a, b)
    assert len(scale_add._kernel_cache) == 3


def test_compile_by_sizes_gives_a_kernel():
    kernel = scale_add.compile(M=40, N=8, alpha=1.0)
    assert [p.name for p in kernel.params] == ["A", "B", "C"] and kernel.out_idx == [2]
    a, b = torch.randn(40, 8), torch.randn(40, 8)
    torch.testing.assert_close(kernel(a, b), a + b)
    assert "define" in scale_add.get_kernel_source(M=40, N=8)


def test_macro_returning_an_output_and_signature_types():
    a = torch.randn(48, 8)
    assert torch.equal(copy_static(a), a)
    for rows in (48, 50):  # N is dynamic: one kernel serves both
        a = torch.randn(rows, 8)
        assert torch.equal(copy_dynamic_rows(a), a)
    assert len(copy_dynamic_rows._kernel_cache) == 1


def test_inputs_written_in_place_and_nothing_returned():
    a, c = torch.randn(32), torch.empty(32)
    assert double_into(a, c) is None
    torch.testing.assert_close(c, a * 2)


def test_get_tir_accepts_placeholders_and_par_compile():
    func = copy_static.get_tir(T.Tensor((48, 8), T.float32))
    assert [p.name for p in func.params][0] == "A" and len(func.params) == 2
    kernels = tilelang.par_compile([double_into.get_tir(N=n) for n in (8, 16)], target="cpu")
    assert len(kernels) == 2
    assert [k.params[0].shape for k in double_into.par_compile([{"N": 4}, {"N": 12}])] == \
        [[4], [12]]


def test_errors_name_the_size_or_the_parameter():
    with pytest.raises(DSLError, match="T.const: the size 'N' was not bound"):
        double_into.compile()
    with pytest.raises(KernelArgumentError, match="size M is 8 .* but 4"):
        scale_add(torch.randn(8, 8), torch.randn(4, 8))
    with pytest.raises(TypeError, match="neither parameters nor T.const sizes"):
        double_into.compile(N=8, Q=3)
    with pytest.raises(DSLError, match="only meaningful in the body of an eager"):
        T.const("M")


@tilelang.jit
def eager_matmul(A, B, block_M: int = 64, block_N: int = 64, block_K: int = 32):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), T.float16)
        B_s = T.alloc_shared((block_K, block_N), T.float16)
        C_f = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_f)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, C_f)
        T.copy(C_f, C[by * block_M, bx * block_N])
    return C


@pytest.mark.gpu
def test_eager_gemm_on_cuda_tensors_compiles_for_the_gpu():
    a = torch.randn(256, 128, dtype=torch.float16, device="cuda")
    b = torch.randn(128, 192, dtype=torch.float16, device="cuda")
    c = eager_matmul(a, b)
    assert c.device.type == "cuda"
    torch.testing.assert_close(c, a @ b, rtol=1e-2, atol=1e-2)
    (kernel, _, _), = eager_matmul._kernel_cache.values()
    assert kernel.target.kind.name == "cuda"


def test_a_body_that_is_a_kernel_is_the_eager_style():
    @tilelang.jit(target="cpu")
    def counts(n: int = 4):
        with T.Kernel(1, threads=1):
            acc = T.alloc_fragment((n,), T.float32)
            for i in T.Parallel(n):
                acc[i] = i

    assert isinstance(counts, EagerJITFunction)
    assert "acc" in counts.get_tir(n=8).script()
    counts.compile(n=8)

    @tilelang.jit
    def factory(n: int = 4):
        @T.prim_func
        def main(A: T.Tensor((n,), T.float32)):
            with T.Kernel(1, threads=1):
                for i in T.serial(n):
                    A[i] = i

        return main

    assert isinstance(factory, _JITFunction)
