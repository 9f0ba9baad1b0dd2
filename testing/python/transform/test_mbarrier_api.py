"""The user-level mbarrier/TMA API (T.alloc_barrier, T.mbarrier_*, T.barrier_*, T.tma_copy,
T.fence_proxy_async) at pass level: barriers are planned shared resources initialized once at
kernel entry, T.tma_copy arms its barrier and issues from one thread."""

import os
import sys

import pytest
import tvm

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError, LoweringError
from tilelang.ir_utils import find_all

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tma_programs import producer_consumer  # noqa: E402


def calls(func, name):
    return find_all(func.body, tvm.ir.Call,
                    lambda c: isinstance(c.op, tvm.ir.Op) and c.op.name == f"tl.device.{name}")


def test_barriers_are_planned_and_initialized_once():
    mod = tilelang.lower(producer_consumer(), target="cuda -arch=sm_90a", stage="tile")
    f = mod[mod.get_global_vars()[0]]
    text = f.script()
    assert [int(c.args[1]) for c in calls(f, "mbarrier_init")] == [128, 128, 128, 128]
    # barriers live in the shared arena, 8-byte aligned like every tile there
    assert 'full = T.decl_buffer((2,), "uint64", data=smem.data' in text
    # initialized by thread 0 before anything else, then fence + block barrier
    head = text.index("T.device_mbarrier_init")
    assert text.index("if tx == 0:") < head < text.index("T.device_fence_mbarrier_init()") \
        < text.index("T.device_barrier(0, 128)") < text.index("for i in range(4)")
    # each T.tma_copy: thread 0 expects the tile's bytes (no arrival), then issues; the
    # threads arrive themselves
    assert [int(c.args[1]) for c in calls(f, "mbarrier_expect_tx")] == [8192, 8192]
    assert not calls(f, "mbarrier_arrive_expect_tx")
    assert len(calls(f, "tma_load")) == 2 and len(calls(f, "mbarrier_wait")) == 4
    assert len(calls(f, "mbarrier_arrive")) == 4


def test_alloc_barrier_arguments():
    with pytest.raises(DSLError, match="positive ints"):
        @T.prim_func
        def bad(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.alloc_barrier(0)


def test_barrier_needs_index_when_several():
    with pytest.raises(DSLError, match="index it"):
        @T.prim_func
        def bad(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                b = T.alloc_barrier([32, 32])
                T.mbarrier_arrive(b)


def test_cpu_refuses_barriers():
    @T.prim_func
    def k(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=1):
            b = T.alloc_barrier(1)
            T.mbarrier_arrive(b)
            T.mbarrier_wait_parity(b, 0)

    with pytest.raises(LoweringError, match="mbarriers and TMA exist on CUDA"):
        tilelang.lower(k, target="llvm")


def test_tma_copy_that_tma_cannot_do_raises():
    @T.prim_func
    def k(A: T.Tensor((64, 100), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 100), "float16")
            b = T.alloc_barrier(1)
            T.tma_copy(A[0, 0], S, barrier=b)
            T.mbarrier_wait_parity(b, 0)

    with pytest.raises(LoweringError, match="not a proven multiple of 16 bytes"):
        tilelang.lower(k, target="cuda -arch=sm_90a")
