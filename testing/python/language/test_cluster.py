"""Thread block clusters (T.ClusterKernel, T.cluster_*, T.block_rank_in_cluster,
T.alloc_cluster_barrier with remote arrivals, T.clc_*) and the grid barrier T.sync_grid: the
launch shape reaching TVM's launch, the CUDA source and sm_90a PTX, the argument and target
errors, the CPU refusal, and GPU-marked runs (each in a subprocess under a timeout: a wrong
barrier hangs the GPU)."""

import os
import sys
import textwrap

import pytest
import tvm

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError, LoweringError
from tilelang.ir_utils import find_all

SM90, SM80 = "cuda -arch=sm_90a", "cuda -arch=sm_80"


def _body(src: str) -> str:
    return src[src.index('extern "C" __global__'):]


def rank_program(n=128, cluster=4):
    @T.prim_func
    def main(A: T.Tensor((n,), T.int32)):
        with T.ClusterKernel(n, cluster_dims=(cluster, 1, 1), threads=64) as bx:
            T.cluster_arrive()
            T.cluster_wait()
            r = T.block_rank_in_cluster()
            if T.get_thread_binding() == 0:
                A[bx] = r
            T.cluster_sync()

    return main


def handoff_program(n=8, cluster=2):
    """Block 1 of each cluster of two writes a value into global memory and arrives on block
    0's cluster barrier; block 0's thread 0 waits and copies it (release/acquire across the
    two blocks)."""
    @T.prim_func
    def main(A: T.Tensor((n,), T.int32), B: T.Tensor((n,), T.int32)):
        with T.ClusterKernel(n, cluster_dims=cluster, threads=32) as bx:
            bar = T.alloc_cluster_barrier([1])
            tx = T.get_thread_binding()
            T.cluster_sync()
            rank = T.block_rank_in_cluster()
            if rank == 1 and tx == 0:
                A[bx] = bx * 10 + 7
                T.mbarrier_arrive(bar[0], 0)
            if rank == 0 and tx == 0:
                T.mbarrier_wait_parity(bar[0], 0)
                B[bx] = A[bx + 1]
            T.cluster_sync()

    return main


def launch_params(func, target=SM90):
    mod = tilelang.lower(func, target=target)
    kernels = [f for _, f in mod.functions.items()
               if f.attrs and "tirx.kernel_launch_params" in f.attrs and
               "calling_conv" in f.attrs and int(f.attrs["calling_conv"]) == 2]
    (kernel,) = kernels
    calls = find_all(mod["main"].body, tvm.ir.Call,
                     lambda c: isinstance(c.op, tvm.ir.Op) and "call_ffi_kernel" in c.op.name)
    return [str(t) for t in kernel.attrs["tirx.kernel_launch_params"]], calls


def test_cluster_shape_reaches_the_launch():
    tags, (call,) = launch_params(rank_program())
    # the launch values follow the kernel's one argument, one per tag
    values = dict(zip(tags, [int(v) for v in call.args[2:]]))
    assert values == {"blockIdx.x": 128, "threadIdx.x": 64, "clusterCtaIdx.x": 4}


def test_two_dimensional_cluster():
    @T.prim_func
    def main(A: T.Tensor((8, 8), T.int32)):
        with T.ClusterKernel(8, 4, cluster_dims=(2, 2, 1), threads=32) as (bx, by):
            if T.get_thread_binding() == 0:
                A[by, bx] = T.block_rank_in_cluster()

    tags, (call,) = launch_params(main)
    assert [t for t in tags if t.startswith("cluster")] == ["clusterCtaIdx.x", "clusterCtaIdx.y"]
    values = dict(zip(tags, [int(v) for v in call.args[2:]]))
    assert values == {"blockIdx.x": 8, "blockIdx.y": 4, "threadIdx.x": 32,
                      "clusterCtaIdx.x": 2, "clusterCtaIdx.y": 2}


def test_kernel_takes_cluster_dims_and_one_block_clusters_launch_plainly():
    @T.prim_func
    def main(A: T.Tensor((4,), T.int32)):
        with T.Kernel(4, threads=32, cluster_dims=(1, 1, 1)) as bx:
            A[bx] = 1

    tags, _ = launch_params(main)
    assert not any(t.startswith("cluster") for t in tags)


def test_cluster_barrier_and_rank_in_sm90a_ptx():
    k = tilelang.compile(rank_program(), out_idx=[0], target=SM90)
    src = k.get_kernel_source()
    assert "#include <tl_templates/cuda/cluster.h>" in src
    body = _body(src)
    for call in ("tl::cluster_arrive()", "tl::cluster_wait()", "tl::block_rank_in_cluster()",
                 "tl::cluster_sync()"):
        assert call in body
    ptx = k.get_ptx()
    assert ptx.count("barrier.cluster.arrive.release") == 2  # arrive, and cluster_sync's
    assert ptx.count("barrier.cluster.wait.acquire") == 2
    assert "%cluster_ctarank" in ptx


def test_remote_arrival_and_cluster_scope_wait_in_sm90a_ptx():
    k = tilelang.compile(handoff_program(), out_idx=[1], target=SM90)
    body = _body(k.get_kernel_source())
    assert "tl::mbarrier_arrive_remote(" in body and "tl::mbarrier_wait_cluster(" in body
    assert "tl_mbarrier_wait(" not in body  # the cta-scope wait of ordinary barriers
    ptx = k.get_ptx()
    assert "mapa.shared::cluster.u32" in ptx
    assert "mbarrier.arrive.release.cluster.shared::cluster.b64" in ptx
    assert "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64" in ptx
    assert "mbarrier.init.shared.b64" in ptx  # initialized like any T.alloc_barrier


def test_ordinary_barrier_keeps_the_cta_scope_wait():
    @T.prim_func
    def main(A: T.Tensor((4,), T.int32)):
        with T.Kernel(4, threads=32) as bx:
            bar = T.alloc_barrier([32])
            T.mbarrier_arrive(bar[0])
            T.mbarrier_wait_parity(bar[0], 0)
            A[bx] = 1

    body = _body(tilelang.compile(main, target=SM90).get_kernel_source())
    assert "tl_mbarrier_wait(" in body and "mbarrier_wait_cluster" not in body


def clc_program():
    @T.prim_func
    def main(A: T.Tensor((4,), T.int32)):
        with T.Kernel(1, threads=32):
            result = T.alloc_shared((4,), T.uint32)
            bar = T.alloc_barrier([1])
            T.clc_try_cancel(result, bar[0])
            T.mbarrier_wait_parity(bar[0], 0)
            A[0] = T.clc_is_canceled(result)
            A[1] = T.Cast("int32", T.clc_get_first_ctaid_x(result))
            A[2] = T.Cast("int32", T.clc_get_first_ctaid_y(result))
            A[3] = T.Cast("int32", T.clc_get_first_ctaid_z(result))

    return main


def test_cluster_launch_control_queries():
    k = tilelang.compile(clc_program(), out_idx=[0], target=SM90)
    src = k.get_kernel_source()
    assert "#include <tl_templates/cuda/cluster.h>" in src
    for name in ("clc_try_cancel", "clc_is_canceled", "clc_get_first_ctaid_x",
                 "clc_get_first_ctaid_y", "clc_get_first_ctaid_z"):
        assert f"tl::{name}(" in src
    # sm_100 instructions: below sm_100 the helpers trap
    assert "clusterlaunchcontrol" not in k.get_ptx() and "trap;" in k.get_ptx()


def test_cluster_launch_control_ptx_on_sm100a():
    from tilelang.engine.cuda import compile_source
    from tilelang.engine.target import resolve

    src = tilelang.compile(clc_program(), out_idx=[0], target=SM90).get_kernel_source()
    ptx = compile_source(src, resolve("cuda -arch=sm_100a"), "ptx").decode()
    assert "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes" in ptx
    assert "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128" in ptx
    assert "clusterlaunchcontrol.query_cancel.get_first_ctaid::y.b32.b128" in ptx


@pytest.mark.parametrize("grid, dims, match", [
    ((6,), (4, 1, 1), "grid dimension 0 has 6 blocks, not a multiple of the cluster's 4"),
    ((8, 3), (2, 2, 1), "grid dimension 1 has 3 blocks"),
    ((64,), (32, 1, 1), "larger than the 16 blocks"),
    ((8,), (0, 1, 1), "cluster_dims must be a positive int"),
    ((8,), (2, 1, 1, 1), "cluster_dims must be a positive int"),
    ((8,), 2.0, "cluster_dims must be a positive int"),
])
def test_cluster_shape_errors(grid, dims, match):
    with pytest.raises(DSLError, match=match):
        @T.prim_func
        def main(A: T.Tensor((8,), T.int32)):
            with T.ClusterKernel(*grid, cluster_dims=dims, threads=32):
                A[0] = 1


def test_clusters_need_sm90():
    with pytest.raises(LoweringError, match="T.ClusterKernel .*from sm_90 on; the target is sm_80"):
        tilelang.compile(rank_program(), target=SM80)

    @T.prim_func
    def main(A: T.Tensor((4,), T.int32)):
        with T.Kernel(4, threads=32):
            T.cluster_sync()

    with pytest.raises(LoweringError, match="T.cluster_sync needs thread block clusters"):
        tilelang.compile(main, target=SM80)


def test_clusters_and_grid_barriers_are_refused_on_the_cpu():
    with pytest.raises(LoweringError, match="CPU backend cannot run a kernel that uses "
                                            "T.ClusterKernel"):
        tilelang.compile(rank_program(), target="cpu")
    with pytest.raises(LoweringError, match="T.sync_grid"):
        tilelang.compile(grid_program(), target="cpu")


def test_cluster_ops_need_a_kernel_and_checked_arguments():
    with pytest.raises(DSLError, match="only valid inside a T.Kernel"):
        T.cluster_sync()
    with pytest.raises(DSLError, match="arrive counts must be positive ints"):
        T.alloc_cluster_barrier([0])
    with pytest.raises(DSLError, match="result .* must hold the 16-byte response"):
        @T.prim_func
        def main(A: T.Tensor((1,), T.int32)):
            with T.Kernel(1, threads=32):
                small = T.alloc_shared((2,), T.uint32)
                A[0] = T.clc_is_canceled(small)


# T.sync_grid --------------------------------------------------------------------------------
def grid_program(n=256, block=64):
    """Every block writes its part, the grid synchronizes, then each block reads the mirrored
    part another block wrote."""
    @T.prim_func
    def main(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
        with T.Kernel(n // block, threads=block) as bx:
            tx = T.get_thread_binding()
            A[bx * block + tx] = T.Cast("float32", bx * block + tx)
            T.sync_grid()
            B[bx * block + tx] = A[n - 1 - (bx * block + tx)]

    return main


def test_grid_barrier_source_and_cooperative_launch():
    mod = tilelang.lower(grid_program(), target=SM90)
    (kernel,) = [f for _, f in mod.functions.items() if f.attrs and "calling_conv" in f.attrs
                 and int(f.attrs["calling_conv"]) == 2]
    assert "tirx.use_cooperative_launch" in [str(t) for t in
                                             kernel.attrs["tirx.kernel_launch_params"]]
    src = mod.kernel_source
    assert "#include <cooperative_groups.h>" in src
    assert _body(src).count("cooperative_groups::this_grid().sync();") == 1


def grid_in_parallel_program(n=1024, block=64, threads=128):
    """The public TileLang's cooperative test: a grid barrier inside T.Parallel, between each
    iteration's read of a mirrored element and its write (every read must come first)."""
    @T.prim_func
    def main(A: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, block), threads=threads) as bx:
            A_local = T.alloc_fragment((block,), T.float32)
            for i in T.Parallel(block):
                A[bx * block + i] = bx * block + i
            T.sync_grid()
            for i in T.Parallel(block):
                A_local[i] = A[n - bx * block - i - 1]
                T.sync_grid()
                A[bx * block + i] = A[bx * block + i] + A_local[i]

    return main


def test_a_barrier_inside_t_parallel_keeps_one_iteration_per_thread():
    """A thread running several iterations of a loop with a barrier in its body would write
    its first element before reading its second, which another block already overwrote (the
    fragment was laid out four floats per thread, a wrong answer on the H200).  With 64
    iterations over 128 threads each thread runs at most one: one barrier in the body."""
    body = _body(tilelang.lower(grid_in_parallel_program(), target=SM90).kernel_source)
    assert body.count("cooperative_groups::this_grid().sync();") == 2
    assert "A_local_ptr[1];" in body


def test_kernels_without_grid_barrier_launch_plainly():
    tags, _ = launch_params(rank_program())
    assert "tirx.use_cooperative_launch" not in tags


# GPU runs: a subprocess each, under a timeout -------------------------------------------------
def run(code: str, timeout: int = 240) -> None:
    """Run ``code`` (this module's programs imported) in a fresh interpreter; fails on a
    non-zero exit or a hang."""
    here = os.path.dirname(os.path.abspath(__file__))
    prelude = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {here!r})
        import torch, tilelang
        from test_cluster import (rank_program, handoff_program, grid_program,
                                  grid_in_parallel_program)
    """)
    sys.path.insert(0, os.path.dirname(here))
    from gpus import run_script

    run_script(prelude, code, timeout)


def _sm90() -> bool:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from gpus import has_sm90

    return has_sm90()


@pytest.mark.gpu
def test_cluster_rank_on_gpu():
    if not _sm90():
        pytest.skip("needs an sm_90 GPU (clusters)")
    run("""
        for cluster in (2, 4, 8):
            k = tilelang.compile(rank_program(128, cluster), out_idx=[0], target="cuda")
            got = k()
            want = torch.arange(128, dtype=torch.int32, device="cuda") % cluster
            assert torch.equal(got, want), (cluster, got)
    """)


@pytest.mark.gpu
def test_cluster_barrier_handoff_on_gpu():
    if not _sm90():
        pytest.skip("needs an sm_90 GPU (clusters)")
    run("""
        k = tilelang.compile(handoff_program(8, 2), out_idx=[1], target="cuda")
        a = torch.zeros(8, dtype=torch.int32, device="cuda")
        b = k(a)
        want = torch.tensor([17, 0, 37, 0, 57, 0, 77, 0], dtype=torch.int32)
        assert torch.equal(b.cpu() * (torch.arange(8) % 2 == 0), want), b
    """)


@pytest.mark.gpu
def test_grid_barrier_on_gpu():
    run("""
        k = tilelang.compile(grid_program(256, 64), out_idx=[1], target="cuda")
        a = torch.zeros(256, device="cuda")
        b = k(a)
        assert torch.equal(b, torch.arange(256, device="cuda", dtype=torch.float32).flip(0)), b
        k = tilelang.compile(grid_in_parallel_program(), target="cuda")
        a = torch.rand(1024, device="cuda")
        k(a)
        assert torch.equal(a, torch.full_like(a, 1023.0)), a
    """)
