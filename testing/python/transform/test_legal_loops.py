"""LegalizeLoops: unrolled and vectorized loops with a step run exactly their indices (TVM's
unroller and vectorizer ignore the step)."""

import shutil

import pytest
import torch
import tvm
from tvm.script import tirx as TT

import tilelang
import tilelang.language as T
from tilelang.transform.legal_loops import LegalizeLoops


@T.prim_func
def stepped(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
    with T.Kernel(1, threads=1):
        for j in TT.vectorized(0, 16, step=4):
            A[j] = 2.0
        for j in TT.unroll(1, 16, step=4):
            B[j] = 3.0


def test_stepped_loops_iterate_over_their_trip_count():
    out = LegalizeLoops()(tvm.IRModule({"main": stepped.with_attr("target", tvm.target.Target("llvm"))}))["main"]
    text = out.script()
    assert "T.vectorized(4)" in text and "T.unroll(4)" in text
    assert "A[j_k * 4]" in text and "B[1 + j_k * 4]" in text


def test_stepped_loops_run_exactly_their_indices_on_the_cpu():
    a, b = torch.zeros(16), torch.zeros(16)
    tilelang.compile(stepped, target="cpu")(a, b)
    want_a, want_b = torch.zeros(16), torch.zeros(16)
    want_a[::4] = 2
    want_b[1::4] = 3
    torch.testing.assert_close(a, want_a)
    torch.testing.assert_close(b, want_b)


def test_cuda_source_stores_only_the_stepped_indices():
    src = tilelang.compile(stepped, target="cuda -arch=sm_90a").get_kernel_source()
    for i in (1, 5, 9, 13):
        assert f"B_ptr[{i}] =" in src
    assert "B_ptr[2] =" not in src and "B_ptr[0] =" not in src


@T.prim_func
def wide(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
    with T.Kernel(1, threads=1):
        for i in T.vectorized(256):
            B[i] = A[i] * 2.0


def test_wide_vector_loops_split_into_16_byte_accesses_on_cuda():
    src = tilelang.compile(wide, target="cuda -arch=sm_90a").get_kernel_source()
    assert "float4" in src and "float32x" not in src


def test_wide_vector_loops_compute_the_same_on_the_cpu():
    a = torch.randn(256)
    b = torch.zeros(256)
    tilelang.compile(wide, target="cpu")(a, b)
    torch.testing.assert_close(b, a * 2)


@pytest.mark.gpu
def test_stepped_and_wide_loops_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a, b = torch.zeros(16, device="cuda"), torch.zeros(16, device="cuda")
    tilelang.compile(stepped)(a, b)
    assert a.nonzero().flatten().tolist() == [0, 4, 8, 12]
    assert b.nonzero().flatten().tolist() == [1, 5, 9, 13]
    x, y = torch.randn(256, device="cuda"), torch.zeros(256, device="cuda")
    tilelang.compile(wide)(x, y)
    torch.testing.assert_close(y, x * 2)


def _gemm_over_k(K, threads=128):
    @T.prim_func
    def main(A: T.Tensor((64, K), T.float16), B: T.Tensor((K, 64), T.float16),
             C: T.Tensor((64, 64), T.float32)):
        with T.Kernel(1, threads=threads):
            As = T.alloc_shared((64, 32), T.float16)
            Bs = T.alloc_shared((32, 64), T.float16)
            acc = T.alloc_fragment((64, 64), T.float32)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(A[0, k * 32], As)
                T.copy(B[k * 32, 0], Bs)
                T.gemm(As, Bs, acc)
            T.copy(acc, C)

    return main


def test_a_loop_of_no_iterations_over_a_zero_size_dimension_is_removed():
    a, b = torch.randn(64, 0).half(), torch.randn(0, 64).half()
    c = tilelang.compile(_gemm_over_k(0), out_idx=[2], target="cpu")(a, b)
    assert torch.equal(c, torch.zeros(64, 64))
    if shutil.which("nvcc"):  # and no tensor map for the empty operands (TMA refuses them)
        ptx = tilelang.compile(_gemm_over_k(0), out_idx=[2], target="cuda -arch=sm_90a").get_ptx()
        assert "cp.async.bulk.tensor" not in ptx
        assert "cp.async.bulk.tensor" in tilelang.compile(
            _gemm_over_k(64), out_idx=[2], target="cuda -arch=sm_90a").get_ptx()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("form", ["cast", "copy"])
def test_float8_fragments_compile_for_sm80(form):
    # TVM emulates float8 before sm_89 and keeps a float8 fragment in float32; its vector
    # conversion of a vectorized store branched on a vector: nvcc "must have bool type"
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), Q: T.Tensor((64, 64), "float8_e4m3fn")):
        with T.Kernel(1, threads=128):
            F = T.alloc_fragment((64, 64), "float32")
            Qf = T.alloc_fragment((64, 64), "float8_e4m3fn")
            T.copy(A, F)
            if form == "cast":
                for i, j in T.Parallel(64, 64):
                    Qf[i, j] = T.cast(F[i, j] * 2.0, "float8_e4m3fn")
            else:
                T.copy(F, Qf)
            T.copy(Qf, Q)

    assert ".entry" in tilelang.compile(main, out_idx=[1], target="cuda -arch=sm_80").get_ptx()
