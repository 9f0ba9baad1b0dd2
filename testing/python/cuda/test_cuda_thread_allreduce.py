"""A raw ``T.tvm_thread_allreduce`` (under a ``reduce_scope`` comm_reducer, as the public gemv
examples write it) is lowered to warp shuffles, or a shared-memory tree when the reduced
threads are not lanes of one warp, and combines the value over the named thread axis."""

import shutil

import pytest

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError

NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def row_reduce(N, K, block_n, reduce_threads, kind="sum", reduce_axis=1):
    """C[n] = sum (or max) over k of B[n, k]: ``reduce_threads`` threads split each row's K and
    combine their partial values with ``tvm_thread_allreduce`` over thread axis
    ``reduce_axis`` of the block (0: threadIdx.x, the fastest; 1: threadIdx.y)."""
    threads = (reduce_threads, block_n) if reduce_axis == 0 else (block_n, reduce_threads)
    init = 0.0 if kind == "sum" else -3.0e38

    def combine(x, y):
        return x + y if kind == "sum" else T.max(x, y)

    @T.prim_func
    def main(B: T.Tensor((N, K), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_n), threads=threads) as bn:
            tk = T.get_thread_binding(reduce_axis)
            tn = T.get_thread_binding(1 - reduce_axis)
            part = T.alloc_local((1,), "float32")
            total = T.alloc_local((1,), "float32")
            part[0] = T.float32(init)
            for kk in T.serial(K // reduce_threads):
                part[0] = combine(part[0], B[bn * block_n + tn, kk * reduce_threads + tk])
            with T.attr(T.comm_reducer(combine, [T.float32(init)]), "reduce_scope",
                        T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), part[0], True, total[0], tk,
                                                  dtype="handle"))
            C[bn * block_n + tn] = total[0]

    return main


@NVCC
def test_allreduce_over_warp_lanes_is_shuffles():
    k = tilelang.compile(row_reduce(64, 256, 4, 32, reduce_axis=0), out_idx=[1],
                         target="cuda -arch=sm_90a")
    assert "tvm_thread_allreduce" not in k.get_kernel_source()
    assert "shfl.sync.bfly" in k.get_ptx() or "shfl.sync.down" in k.get_ptx()


@NVCC
@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("reduce_threads,reduce_axis", [(32, 1), (128, 0), (8, 1)])
def test_allreduce_compiles_for_sm90a(kind, reduce_threads, reduce_axis):
    k = tilelang.compile(row_reduce(64, 256, 2, reduce_threads, kind, reduce_axis),
                         out_idx=[1], target="cuda -arch=sm_90a")
    assert "tvm_thread_allreduce" not in k.get_kernel_source()
    assert ".entry" in k.get_ptx()


def test_allreduce_on_cpu_names_the_thread_index():
    # the CPU backend runs a block on one thread: a raw thread index has no meaning there
    with pytest.raises(LoweringError, match="thread index"):
        tilelang.compile(row_reduce(8, 32, 2, 4), out_idx=[1], target="llvm")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("block_n,reduce_threads,reduce_axis",
                         [(4, 32, 0), (4, 32, 1), (2, 128, 0), (8, 8, 1), (1, 256, 0)])
def test_allreduce_matches_torch(kind, block_n, reduce_threads, reduce_axis):
    import torch

    N, K = 64, 512
    k = tilelang.compile(row_reduce(N, K, block_n, reduce_threads, kind, reduce_axis),
                         out_idx=[1], target="cuda")
    b = torch.randn(N, K, device="cuda")
    ref = b.sum(1) if kind == "sum" else b.amax(1)
    torch.testing.assert_close(k(b), ref, rtol=1e-5, atol=1e-4)
