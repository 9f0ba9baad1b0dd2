"""The device operations of Hopper's asynchronous copy path, each with its declared effect:
mbarriers (init, arrive, arrive with expected transaction bytes, wait on a phase parity),
their fences, and the tensor-memory-accelerator copies (``cp.async.bulk.tensor``) global ->
shared (completing on an mbarrier) and shared -> global (bulk groups).

mbarrier rules (measured on the H200, see ``shared/notes/tvm-0.27.md``): ``init(count)``
counts arrivals; a phase completes when ``count`` arrivals happened and every expected
transaction byte has landed; the first phase has parity 0 and the parity flips on every
completion; a wait on the parity of the phase just completed returns at once.  Every op is
emitted as TVM's PTX op (``T.ptx.*``) or TVM's wait loop (``T.cuda.mbarrier_wait``).
"""

from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as _T

from .effects import Access, Effect, Mechanism, Memory, Proxy, call, register_device_op

S = Memory.SHARED


def _imm(e) -> int:
    return int(e.value)


def _u32(e):
    return e if str(e.ty) == "uint32" else tirx.Cast("uint32", e)


def _i32(e):
    return e if str(e.ty) == "int32" else tirx.Cast("int32", e)


# mbarriers --------------------------------------------------------------------------------
MBARRIER_INIT = register_device_op(
    "tl.device.mbarrier_init", Effect(accesses=(Access((0,), S, write=True),)),
    lambda c: _T.ptx.mbarrier.init.shared.b64(c.args[0], _u32(c.args[1])),
    "mbarrier.init [bar], count: a barrier whose phases complete after `count` arrivals")

FENCE_MBARRIER_INIT = register_device_op(
    "tl.device.fence_mbarrier_init", Effect(proxy=Proxy.ASYNC),
    lambda c: _T.ptx.fence.mbarrier_init.release.cluster(),
    "fence.mbarrier_init: initialized barriers become visible to the async proxy")

MBARRIER_ARRIVE = register_device_op(
    "tl.device.mbarrier_arrive", Effect(commits=Mechanism.MBARRIER),
    lambda c: _T.ptx.mbarrier.arrive.shared.b64(c.args[0], _T.uint32(1)),
    "mbarrier.arrive [bar]: this thread's arrival on the current phase")

MBARRIER_ARRIVE_EXPECT_TX = register_device_op(
    "tl.device.mbarrier_arrive_expect_tx", Effect(commits=Mechanism.MBARRIER),
    lambda c: _T.ptx.mbarrier.arrive.expect_tx.shared.b64(c.args[0], _u32(c.args[1])),
    "mbarrier.arrive.expect_tx [bar], bytes: arrive and expect `bytes` more transaction "
    "bytes before the phase completes")

MBARRIER_EXPECT_TX = register_device_op(
    "tl.device.mbarrier_expect_tx", Effect(),
    lambda c: _T.ptx.mbarrier.expect_tx.shared.b64(c.args[0], _u32(c.args[1])),
    "mbarrier.expect_tx [bar], bytes: expect `bytes` more transaction bytes (no arrival)")

MBARRIER_WAIT = register_device_op(
    "tl.device.mbarrier_wait", Effect(waits=Mechanism.MBARRIER),
    lambda c: _T.cuda.mbarrier_wait(c.args[0], _i32(c.args[1])),
    "wait until the phase of parity `parity` of the barrier has completed "
    "(a mbarrier.try_wait.parity loop); its writes are then visible to this thread")


def mbarrier_init(bar_addr, count) -> tirx.Call:
    return call(MBARRIER_INIT, bar_addr, count)


def fence_mbarrier_init() -> tirx.Call:
    return call(FENCE_MBARRIER_INIT)


def mbarrier_arrive(bar_addr) -> tirx.Call:
    return call(MBARRIER_ARRIVE, bar_addr)


def mbarrier_arrive_expect_tx(bar_addr, nbytes) -> tirx.Call:
    return call(MBARRIER_ARRIVE_EXPECT_TX, bar_addr, nbytes)


def mbarrier_expect_tx(bar_addr, nbytes) -> tirx.Call:
    return call(MBARRIER_EXPECT_TX, bar_addr, nbytes)


def mbarrier_wait(bar_addr, parity) -> tirx.Call:
    return call(MBARRIER_WAIT, bar_addr, parity)


# TMA --------------------------------------------------------------------------------------
def _emit_tma_load(c):
    dst, tmap, bar, *coords = c.args
    chain = (f"cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global"
             ".mbarrier::complete_tx::bytes")
    return _T.ptx[chain](dst, tmap, *[_i32(x) for x in coords], bar)


TMA_LOAD = register_device_op(
    "tl.device.tma_load",
    Effect(accesses=(Access((0,), S, write=True),), proxy=Proxy.ASYNC,
           completes_on=Mechanism.MBARRIER),
    _emit_tma_load,
    "cp.async.bulk.tensor global -> shared: the box of the tensor map at `coords` "
    "(innermost first; out-of-range elements read as zero) lands in the tile and completes "
    "its bytes on the barrier")


def _emit_tma_store(c):
    tmap, src, *coords = c.args
    chain = f"cp.async.bulk.tensor.{len(coords)}d.global.shared::cta.tile.bulk_group"
    return _T.ptx[chain](tmap, *[_i32(x) for x in coords], src)


TMA_STORE = register_device_op(
    "tl.device.tma_store",
    Effect(accesses=(Access((1,), S),), proxy=Proxy.ASYNC,
           completes_on=Mechanism.BULK_GROUP),
    _emit_tma_store,
    "cp.async.bulk.tensor shared -> global: the tile goes to the box of the tensor map at "
    "`coords`; out-of-range elements are not written")

TMA_STORE_COMMIT = register_device_op(
    "tl.device.tma_store_commit", Effect(commits=Mechanism.BULK_GROUP),
    lambda c: _T.ptx.cp.async_.bulk.commit_group(), "cp.async.bulk.commit_group")

TMA_STORE_WAIT = register_device_op(
    "tl.device.tma_store_wait", Effect(waits=Mechanism.BULK_GROUP, pending_arg=0),
    lambda c: _T.ptx.cp.async_.bulk.wait_group.read(_imm(c.args[0])),
    "cp.async.bulk.wait_group.read N: at most N bulk groups still read shared memory")


def tma_load(dst_addr, tensor_map_addr, bar_addr, coords) -> tirx.Call:
    """``coords``: the box's start, innermost dimension first."""
    return call(TMA_LOAD, dst_addr, tensor_map_addr, bar_addr, *coords)


def tma_store(tensor_map_addr, src_addr, coords) -> tirx.Call:
    return call(TMA_STORE, tensor_map_addr, src_addr, *coords)


def tma_store_commit() -> tirx.Call:
    return call(TMA_STORE_COMMIT)


def tma_store_wait(pending: int) -> tirx.Call:
    return call(TMA_STORE_WAIT, pending)
