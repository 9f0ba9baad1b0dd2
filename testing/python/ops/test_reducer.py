"""T.alloc_reducer / T.finalize_reducer: per-thread copies combined at the finalize.  CPU
numerics against torch, and the CUDA lowering's combine (sm_90a source and PTX)."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError

from reducer_programs import centered, gemv, row_reduce

REF = {"sum": lambda a: a.sum(1), "max": lambda a: a.max(1).values,
       "min": lambda a: a.min(1).values}


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("replication", ["all", None])
def test_row_reduce_cpu(op, replication):
    a = torch.randn(64, 32)
    b = tilelang.compile(row_reduce(64, 32, op, replication=replication), out_idx=[1],
                         target="cpu")(a)
    torch.testing.assert_close(b, REF[op](a), atol=1e-4, rtol=1e-4)


def test_gemv_pattern_cpu():
    a, x = torch.randn(96, 256).half(), torch.randn(256).half()
    o = tilelang.compile(gemv(96, 256), out_idx=[2], target="cpu")(a, x)
    torch.testing.assert_close(o.float(), a.float() @ x.float(), atol=5e-2, rtol=2e-2)


def test_reducer_read_after_finalize_cpu():
    g = torch.randn(64, 8)
    o = tilelang.compile(centered(64, 8), out_idx=[1], target="cpu")(g)
    torch.testing.assert_close(o, g - g.sum(1, keepdim=True), atol=1e-4, rtol=1e-4)


def test_reducer_argument_errors():
    def build(fn):
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                fn(A)
        return main

    with pytest.raises(DSLError, match="op must be one of"):
        build(lambda A: T.alloc_reducer(8, "float32", op="prod"))
    with pytest.raises(DSLError, match="replication must be"):
        build(lambda A: T.alloc_reducer(8, "float32", replication="some"))
    with pytest.raises(DSLError, match="expects a buffer from T.alloc_reducer"):
        build(lambda A: T.finalize_reducer(T.alloc_fragment(8, "float32")))
    with pytest.raises(DSLError, match="batch must be a positive int"):
        build(lambda A: T.finalize_reducer(T.alloc_reducer(8, "float32"), batch=0))


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def cuda_source(func, out_idx):
    k = tilelang.compile(func, out_idx=out_idx, target="cuda -arch=sm_90a")
    k.get_ptx()  # nvcc compiles it
    src = k.get_kernel_source()
    return src[src.index("main_kernel("):]


@needs_nvcc
@pytest.mark.parametrize("op,combine", [("sum", "SumOp"), ("max", "MaxOp"), ("min", "MinOp")])
def test_finalize_combines_every_threads_copy(op, combine):
    body = cuda_source(row_reduce(64, 32, op, threads=128), [1])
    # every thread holds the whole reducer (64 elements) and updates only its own rows
    assert "float r_ptr[64];" in body
    assert f"tl::all_reduce_array<tl::{combine}, 64, 128, 0, 0>" in body


@needs_nvcc
def test_finalize_within_one_warp_needs_no_shared_scratch():
    body = cuda_source(row_reduce(16, 32, "sum", threads=32), [1])
    assert "tl::all_reduce_array<tl::SumOp, 16, 32, 0, 0>" in body
    assert "smem_ptr" not in body.split("tl::all_reduce_array")[1].split(";")[0]


@needs_nvcc
def test_gemv_pattern_compiles_pipelined():
    body = cuda_source(gemv(96, 256), [2])
    assert "tl::all_reduce_array<tl::SumOp, 32, 128, 0, 0>" in body


@needs_nvcc
def test_replication_none_is_a_fragment_without_combine():
    @T.prim_func
    def main(A: T.Tensor((64, 8), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            r = T.alloc_reducer(64, "float32", replication="none")
            T.clear(r)
            for i in T.Parallel(64):
                for j in T.serial(8):
                    r[i] += A[i, j]
            T.finalize_reducer(r)
            T.copy(r, B)

    assert "all_reduce_array" not in cuda_source(main, [1])
    a = torch.randn(64, 8)
    torch.testing.assert_close(tilelang.compile(main, out_idx=[1], target="cpu")(a), a.sum(1))


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("threads", [32, 128, 256])
def test_row_reduce_gpu(op, threads):
    a = torch.randn(64, 32, device="cuda")
    b = tilelang.compile(row_reduce(64, 32, op, threads=threads), out_idx=[1],
                         target="cuda")(a)
    torch.testing.assert_close(b, REF[op](a), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_gemv_and_centered_gpu():
    a, x = torch.randn(96, 256, device="cuda").half(), torch.randn(256, device="cuda").half()
    o = tilelang.compile(gemv(96, 256), out_idx=[2], target="cuda")(a, x)
    torch.testing.assert_close(o.float(), a.float() @ x.float(), atol=5e-2, rtol=2e-2)
    g = torch.randn(64, 8, device="cuda")
    o = tilelang.compile(centered(64, 8), out_idx=[1], target="cuda")(g)
    torch.testing.assert_close(o, g - g.sum(1, keepdim=True), atol=1e-4, rtol=1e-4)
