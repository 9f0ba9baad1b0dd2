"""The device operations of the sm80-class CUDA path, each with its declared effect.

Instructions that TVM's PTX op table has (``cp.async``, its commit/wait, ``bar.sync``,
``fence.proxy.async``) are emitted as those ops; genuine templates of our headers
(``src/tl_templates/cuda``: the block-level mma gemm, the cross-thread all-reduce) are emitted
as calls of the template; atomics are in ``atomics``.  Builders return ``Call`` nodes.
"""

from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as _T

from .effects import (Access, Effect, Mechanism, Memory, Proxy, Sync, call,
                      register_device_op)
from .thread_group import WARP_BARRIER

G, S, R = Memory.GLOBAL, Memory.SHARED, Memory.REGISTER


def _imm(e) -> int:
    return int(e.value)


def _u32(e):
    return e if str(e.ty) == "uint32" else tirx.Cast("uint32", e)


# cp.async ---------------------------------------------------------------------------------
def _emit_cp_async(c):
    dst, src, nbytes, valid = c.args
    n = _imm(nbytes)
    size = tirx.Select(valid, tirx.const(n, "uint32"), tirx.const(0, "uint32"))
    if n == 16:
        return _T.ptx.cp.async_.cg.shared.global_(dst, src, 16, size)
    return _T.ptx.cp.async_.ca.shared.global_(dst, src, n, size)


CP_ASYNC = register_device_op(
    "tl.device.cp_async",
    Effect(accesses=(Access((0,), S, write=True), Access((1,), G)),
           completes_on=Mechanism.CP_ASYNC_GROUP),
    _emit_cp_async,
    "cp.async of 4, 8 or 16 bytes global -> shared; zero-fills when `valid` is false")

CP_ASYNC_COMMIT = register_device_op(
    "tl.device.cp_async_commit", Effect(commits=Mechanism.CP_ASYNC_GROUP),
    lambda c: _T.ptx.cp.async_.commit_group(), "cp.async.commit_group")

CP_ASYNC_WAIT = register_device_op(
    "tl.device.cp_async_wait", Effect(waits=Mechanism.CP_ASYNC_GROUP, pending_arg=0),
    lambda c: _T.ptx.cp.async_.wait_group(_imm(c.args[0])),
    "cp.async.wait_group N: at most N committed groups stay in flight")


CP_ASYNC_ARRIVE_NOINC = register_device_op(
    "tl.device.cp_async_mbarrier_arrive_noinc", Effect(commits=Mechanism.MBARRIER),
    lambda c: _T.ptx["cp.async.mbarrier.arrive.noinc.shared.b64"](c.args[0]),
    "cp.async.mbarrier.arrive.noinc [bar]: once every cp.async this thread issued before it "
    "has landed, the thread arrives on the barrier's current phase (counted against the "
    "barrier's arrive count: its writes are published by that phase)")


def cp_async(dst_addr, src_addr, nbytes: int, valid) -> tirx.Call:
    return call(CP_ASYNC, dst_addr, src_addr, nbytes, valid)


def cp_async_commit() -> tirx.Call:
    return call(CP_ASYNC_COMMIT)


def cp_async_wait(pending: int) -> tirx.Call:
    return call(CP_ASYNC_WAIT, pending)


def cp_async_arrive_noinc(bar_addr) -> tirx.Call:
    """Arrive on the mbarrier at ``bar_addr`` when this thread's earlier cp.async have landed."""
    return call(CP_ASYNC_ARRIVE_NOINC, bar_addr)


# barriers and fences ----------------------------------------------------------------------
def _emit_barrier(c):
    bar, count = c.args
    if _imm(bar) == 0:
        return tirx.call_extern("int32", "__syncthreads")
    if _imm(bar) == WARP_BARRIER:
        return tirx.call_extern("int32", "__syncwarp")
    # barrier.sync, not bar.sync (= barrier.sync.aligned): a group's barrier may follow code
    # whose lanes leave at different times (an mbarrier wait loop), and the aligned form let
    # ptxas assume a converged warp there (synccheck: "divergent threads")
    return _T.ptx.barrier.sync(_u32(bar), _u32(count))


BARRIER = register_device_op(
    "tl.device.barrier", Effect(sync=Sync(barrier_arg=0, count_arg=1)), _emit_barrier,
    "barrier.sync id, count: the `count` threads of a group wait for each other; id 0 is the "
    "whole block (__syncthreads), id -1 one warp (__syncwarp)")


def barrier(bar_id: int, count: int) -> tirx.Call:
    return call(BARRIER, bar_id, count)


def barrier_group(c) -> tuple[int, int]:
    """(barrier id, thread count) of a barrier call."""
    sync = BARRIER.effect.sync
    return _imm(c.args[sync.barrier_arg]), _imm(c.args[sync.count_arg])


RELEASE = register_device_op(
    "tl.device.release", Effect(releases=0), lambda c: tirx.const(0, "int32"),
    "no instruction: this thread's use of the tiles ends here; the group's next barrier "
    "hands them over (a cp.async pipeline stage)")


def release(*tiles) -> tirx.Call:
    """Mark the end of this thread's use of ``tiles`` (``address_of`` of each)."""
    return call(RELEASE, *tiles)


def _emit_fence_proxy_async(c):
    if c.args:  # for the given shared tiles only: no wait for global memory
        return getattr(_T.ptx.fence.proxy.async_, "shared::cta")()
    return _T.ptx.fence.proxy.async_()


FENCE_PROXY_ASYNC = register_device_op(
    "tl.device.fence_proxy_async", Effect(proxy=Proxy.ASYNC, orders=0),
    _emit_fence_proxy_async,
    "fence.proxy.async: this thread's generic-proxy accesses before its async-proxy ones; "
    "with tiles (address_of), only shared memory's (.shared::cta)")


FENCE_PROXY_ASYNC_SHARED = register_device_op(
    "tl.device.fence_proxy_async_shared", Effect(proxy=Proxy.ASYNC),
    lambda c: getattr(_T.ptx.fence.proxy.async_, "shared::cta")(),
    "fence.proxy.async.shared::cta: this thread's generic-proxy accesses of the block's shared "
    "memory before its async-proxy ones (the fence without a state space also waits for "
    "global memory: a MEMBAR.GPU)")


def fence_proxy_async(*tiles) -> tirx.Call:
    """A proxy fence; ``tiles`` (``address_of`` of shared tiles) limit it to shared memory and
    let ``ElideProxyFences`` drop it when no generic-proxy write reaches them."""
    return call(FENCE_PROXY_ASYNC, *tiles)


def fence_proxy_async_shared() -> tirx.Call:
    """A proxy fence of all of the block's shared memory (a TMA store's tile, a tile reused
    across proxies), which names no tile and so counts as no read of one."""
    return call(FENCE_PROXY_ASYNC_SHARED)


# templates --------------------------------------------------------------------------------
def _template(fn: str):
    def emit(c):
        targs = str(c.args[0].value)
        return tirx.call_extern(str(c.ty), f"{fn}<{targs}>", *c.args[1:])

    return emit


GEMM_SS = register_device_op(
    "tl.device.gemm_ss",
    Effect(accesses=(Access((1, 2), S), Access((3,), R), Access((3,), R, write=True))),
    _template("tl::gemm_ss"),
    "block-level mma.sync gemm, A and B in shared memory (ldmatrix + mma inside)")

GEMM_RS = register_device_op(
    "tl.device.gemm_rs",
    Effect(accesses=(Access((1,), R), Access((2,), S), Access((3,), R),
                     Access((3,), R, write=True))),
    _template("tl::gemm_rs"),
    "block-level mma.sync gemm, A in registers, B in shared memory")


def gemm(template_args: str, a_ptr, b_ptr, c_ptr, a_in_registers: bool) -> tirx.Call:
    return call(GEMM_RS if a_in_registers else GEMM_SS, template_args, a_ptr, b_ptr, c_ptr)


ALL_REDUCE_WARP = register_device_op(
    "tl.device.all_reduce_warp", Effect(), _template("tl::all_reduce"),
    "combine a value over lanes of a warp (shuffles)")

ALL_REDUCE_GROUP = register_device_op(
    "tl.device.all_reduce_group",
    Effect(accesses=(Access((2,), S), Access((2,), S, write=True)), sync=Sync(at_entry=True)),
    _template("tl::all_reduce"),
    "combine a value over warps of a thread group through shared scratch; contains "
    "barriers of the group")


def all_reduce(template_args: str, value, scratch_ptr=None, dtype: str = "float32") -> tirx.Call:
    if scratch_ptr is None:
        return call(ALL_REDUCE_WARP, template_args, value, dtype=dtype)
    return call(ALL_REDUCE_GROUP, template_args, value, scratch_ptr, dtype=dtype)
