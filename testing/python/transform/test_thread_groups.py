"""Thread groups (T.ws) and the named barriers between them."""

import pytest
import tvm
import tvm_ffi

import tilelang
import tilelang.language as T
from tilelang.device.effects import device_op_of
from tilelang.device.thread_group import WARP_BARRIER, BarrierIds, ThreadGroup
from tilelang.errors import DSLError, LoweringError
from tilelang.transform import (InjectThreadSync, LayoutInference, LowerParallelLoops,
                                LowerTileOps, PlanSharedMemory)

from cuda_helpers import SM80
from helpers import bind


def hand_off_kernel(n=256):
    """Warp group 0 writes a shared tile, warp group 1 reads it (256 threads)."""

    @T.prim_func
    def main(A: T.Tensor((n, 64), "float32"), B: T.Tensor((n, 64), "float32")):
        with T.Kernel(n // 64, threads=256) as bx:
            S = T.alloc_shared((64, 64), "float32")
            with T.ws(0):
                T.copy(A[bx * 64, 0], S)
            with T.ws(1):
                T.copy(S, B[bx * 64, 0])

    return main


def barriers(func):
    """(id, count, enclosing T.ws offset or None) of every barrier, in program order."""
    out = []

    def visit(node, group):
        def on_attr(a):
            if a.attr_key == "tl.thread_group":
                visit(a.body, int(a.value))
                return tvm_ffi.WalkResult.SKIP
            return None

        def on_call(c):
            d = device_op_of(c)
            if d is not None and d.name == "tl.device.barrier":
                out.append((int(c.args[0]), int(c.args[1]), group))

        tvm_ffi.structural_walk(node, [(tvm.tirx.AttrStmt, on_attr), (tvm.ir.Call, on_call)],
                                order="pre")

    visit(func.body, None)
    return out


def lowered(func):
    mod = bind(func, SM80)
    for p in (LayoutInference, LowerTileOps, LowerParallelLoops, PlanSharedMemory,
              InjectThreadSync):
        mod = p()(mod)
    return mod["main"]


def test_hand_off_between_groups_is_a_named_barrier_over_both():
    f = lowered(hand_off_kernel())
    # bar.sync 3, 256 at the end of group 0's region and at the start of group 1's; id 3 is the
    # range of both warp groups (1: warp group 0, 2: warp group 1), never 0 (__syncthreads)
    assert barriers(f) == [(3, 256, 0), (3, 256, 128)]


def test_copies_in_a_group_use_the_group_threads():
    text = lowered(hand_off_kernel()).script()
    # each group's 128 threads split the 64x64 tile (rank tx - offset, simplified to tx % 128)
    assert text.count("tx % 128 // 16") == 4  # a load and a store in each group
    assert "if tx < 128:" in text and "if tx >= 128 and tx < 256:" in text


def test_cuda_source_has_the_named_barrier():
    src = tilelang.compile(hand_off_kernel(), target="cuda -arch=sm_80").get_kernel_source()
    assert "barrier.sync %0, %1;" in src  # not .aligned: lanes may arrive diverged
    assert src.count("tvm_builtin_ptx_barrier_sync_count_sync(((uint)3), ((uint)256));") == 2
    assert "__syncthreads" not in src


@pytest.mark.parametrize("rounds", [1, 3])
def test_tma_load_waited_in_one_group_is_handed_off_by_a_named_barrier(rounds):
    # on sm_90a group 0's copy is a TMA load it waits for on an mbarrier: the wait publishes
    # the tile to group 0 only, so group 1 still needs the named barrier over both groups (and,
    # over several rounds, group 0's next load waits for group 1's reads the same way)
    @T.prim_func
    def main(A: T.Tensor((256, 64), "float32"), B: T.Tensor((256, 64), "float32")):
        with T.Kernel(4, threads=256) as bx:
            S = T.alloc_shared((64, 64), "float32")
            for r in T.serial(rounds):
                with T.ws(0):
                    T.copy(A[bx * 64, 0], S)
                with T.ws(1):
                    T.copy(S, B[bx * 64, 0])

    src = tilelang.compile(main, target="cuda -arch=sm_90a").get_kernel_source()
    body = src.split("main_kernel", 1)[1]
    assert "cp_async_bulk_tensor" in body and "mbarrier_wait" in body
    assert body.count("tvm_builtin_ptx_barrier_sync_count_sync(((uint)3), ((uint)256));") == 2


def test_same_group_hazard_uses_the_group_barrier():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=256) as bx:
            S = T.alloc_shared((64, 64), "float32")
            with T.ws(1):
                T.copy(A, S)
                T.copy(S, B)

    assert barriers(lowered(main)) == [(2, 128, 128)]  # warp group 1's own barrier


def test_barrier_ids_per_kernel():
    ids = BarrierIds(ThreadGroup(0, 384))
    assert ids.of(ThreadGroup(0, 384)) == 0
    assert [ids.of(ThreadGroup(o, 128)) for o in (0, 128, 256)] == [1, 2, 3]
    assert ids.of(ThreadGroup(0, 256)) == 4 and ids.of(ThreadGroup(128, 256)) == 5
    assert ids.of(ThreadGroup(0, 384), divergent=True) == 6
    with pytest.raises(LoweringError, match="ranges of warp groups"):
        ids.of(ThreadGroup(32, 64))
    assert ids.of(ThreadGroup(64, 32)) == WARP_BARRIER  # one warp: __syncwarp


def test_barrier_ids_of_a_block_of_at_most_one_warp_group_count_warps():
    """A block of 96 threads: its ranges of whole warps are numbered (3 + 2 + 1 of them)."""
    ids = BarrierIds(ThreadGroup(0, 96))
    assert ids.of(ThreadGroup(0, 32)) == WARP_BARRIER
    assert ids.of(ThreadGroup(32, 64)) == 5 and ids.of(ThreadGroup(0, 64)) == 4
    assert ids.of(ThreadGroup(0, 96), divergent=True) == 6
    with pytest.raises(LoweringError, match=r"ranges of warps \(32 threads\)"):
        ids.of(ThreadGroup(16, 32))


def test_ws_checks_its_groups():
    def kernel(*ids):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=256) as bx:
                with T.ws(*ids):
                    A[0] = 1.0

        return main

    with pytest.raises(DSLError, match="needs threads up to 383"):
        kernel(2)
    with pytest.raises(DSLError, match="not consecutive"):
        kernel(0, 2)


def test_parallel_loop_inside_a_group_is_spread_over_the_group():
    """A T.Parallel loop in T.ws(1) is laid out over the group's 128 threads (ranks tx - 128),
    each doing 2 of the 256 iterations (see also test_thread_branches.py)."""
    @T.prim_func
    def main(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            with T.ws(1):
                for i in T.Parallel(256):
                    A[i] = 1.0

    src = tilelang.compile(main, target="cuda -arch=sm_80").get_kernel_source()
    assert "A_ptr[(((int)threadIdx.x) - 128)] = " in src  # rank r writes A[r] and A[r + 128]
    assert "A_ptr[((int)threadIdx.x)] = " in src
