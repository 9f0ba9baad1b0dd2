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

import tvm
from tvm import tirx
from tvm.script import tirx as _T

from .effects import (Access, Effect, Mechanism, Memory, Proxy, call, device_op_of,
                      register_device_op)

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
    "tl.device.mbarrier_arrive", Effect(commits=Mechanism.MBARRIER, releases=1),
    lambda c: _T.ptx.mbarrier.arrive.shared.b64(c.args[0], _T.uint32(1)),
    "mbarrier.arrive [bar], tiles...: this thread's arrival on the current phase; the tiles "
    "after the barrier (none, or a pipeline stage's) are handed over by the arrival")

MBARRIER_ARRIVE_EXPECT_TX = register_device_op(
    "tl.device.mbarrier_arrive_expect_tx", Effect(commits=Mechanism.MBARRIER),
    lambda c: _T.ptx.mbarrier.arrive.expect_tx.shared.b64(c.args[0], _u32(c.args[1])),
    "mbarrier.arrive.expect_tx [bar], bytes: arrive and expect `bytes` more transaction "
    "bytes before the phase completes")

MBARRIER_EXPECT_TX = register_device_op(
    "tl.device.mbarrier_expect_tx", Effect(),
    lambda c: _T.ptx.mbarrier.expect_tx.shared.b64(c.args[0], _u32(c.args[1])),
    "mbarrier.expect_tx [bar], bytes: expect `bytes` more transaction bytes (no arrival)")

# The bounded wait of debug mode (``tl.debug_barriers``): a try_wait loop that gives up after
# ``bound`` failed tries, prints who waited on what, and traps (the launch fails with an
# error instead of hanging the GPU).
_DEBUG_WAIT = "tl_debug_mbarrier_wait"
_DEBUG_WAIT_SOURCE = r"""
__noinline__ __device__ void tl_debug_mbarrier_wait(void* bar, int parity, const char* name,
                                                    int stage, unsigned int bound) {
  unsigned int addr = static_cast<unsigned int>(__cvta_generic_to_shared(bar));
  for (unsigned int tries = 0; tries < bound; ++tries) {
    unsigned int done;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(addr), "r"(parity) : "memory");
    if (done) return;
  }
  printf("tilelang debug_barriers: mbarrier wait timed out: barrier %s stage %d, expected "
         "parity %d, block (%d, %d, %d) thread %d, after %u tries\n", name, stage, parity,
         (int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, (int)threadIdx.x, bound);
  asm volatile("trap;");
}
"""


# The wait: a C loop around try_wait, so that the compiler reconverges the warp after it (the
# lanes of a warp may leave at different tries; TVM's own loop branches with ``bra.uni``, which
# let a warp reach the next ``bar.sync`` or ``wgmma`` diverged: synccheck's "divergent
# threads").
_WAIT = "tl_mbarrier_wait"
_WAIT_SOURCE = r"""
__forceinline__ __device__ void tl_mbarrier_wait(void* bar, int parity) {
  unsigned int addr = static_cast<unsigned int>(__cvta_generic_to_shared(bar));
  unsigned int done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(addr), "r"(parity) : "memory");
  } while (!done);
}
"""


def _emit_wait(c):
    if len(c.args) == 2:
        return _T.cuda.func_call(_WAIT, c.args[0], _i32(c.args[1]), source_code=_WAIT_SOURCE)
    bar, parity, name, stage, bound = c.args
    return _T.cuda.func_call(_DEBUG_WAIT, bar, _i32(parity), name, _i32(stage), _u32(bound),
                             source_code=_DEBUG_WAIT_SOURCE)


MBARRIER_WAIT = register_device_op(
    "tl.device.mbarrier_wait", Effect(waits=Mechanism.MBARRIER), _emit_wait,
    "wait until the phase of parity `parity` of the barrier has completed "
    "(a mbarrier.try_wait.parity loop); its writes are then visible to this thread.  With "
    "three more arguments (`name`, `stage`, `bound`: debug mode) the loop gives up after "
    "`bound` tries, prints the block, thread, barrier name, stage and parity, and traps")


def mbarrier_init(bar_addr, count) -> tirx.Call:
    return call(MBARRIER_INIT, bar_addr, count)


def fence_mbarrier_init() -> tirx.Call:
    return call(FENCE_MBARRIER_INIT)


def mbarrier_arrive(bar_addr, *released_tiles) -> tirx.Call:
    """Arrive on ``bar_addr``; ``released_tiles`` (``address_of`` of tiles) are handed over to
    whoever waits on the barrier (so asynchronous reads of them complete first)."""
    return call(MBARRIER_ARRIVE, bar_addr, *released_tiles)


def mbarrier_arrive_expect_tx(bar_addr, nbytes) -> tirx.Call:
    return call(MBARRIER_ARRIVE_EXPECT_TX, bar_addr, nbytes)


def mbarrier_expect_tx(bar_addr, nbytes) -> tirx.Call:
    return call(MBARRIER_EXPECT_TX, bar_addr, nbytes)


def mbarrier_wait(bar_addr, parity, debug: tuple | None = None) -> tirx.Call:
    """``debug``: ``(barrier name, stage, bound)`` for the bounded, reporting wait."""
    return call(MBARRIER_WAIT, bar_addr, parity, *(debug or ()))


def bounded_wait(wait: tvm.ir.Call, name: str, stage, bound: int) -> tirx.Call:
    """The debug form of the wait ``wait`` (a ``mbarrier_wait`` call); unchanged if it is one."""
    if len(wait.args) > 2:
        return wait
    return mbarrier_wait(wait.args[0], wait.args[1], (name, stage, bound))


# TMA --------------------------------------------------------------------------------------
def _emit_tma_load(c):
    """``cp.async.bulk.tensor`` global -> shared; with a mask argument (``tma_load_multicast``),
    multicast to the blocks of the cluster it names."""
    multicast = device_op_of(c) is TMA_LOAD_MULTICAST
    dst, tmap, bar, *coords = c.args
    extra = []
    if multicast:
        mask, *coords = coords
        extra = [mask if str(mask.ty) == "uint16" else tirx.Cast("uint16", mask)]
    chain = (f"cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global"
             ".mbarrier::complete_tx::bytes" + (".multicast::cluster" if multicast else ""))
    return _T.ptx[chain](dst, tmap, *[_i32(x) for x in coords], bar, *extra)


_TMA_LOAD_EFFECT = Effect(accesses=(Access((0,), S, write=True),), proxy=Proxy.ASYNC,
                          completes_on=Mechanism.MBARRIER)

TMA_LOAD = register_device_op(
    "tl.device.tma_load", _TMA_LOAD_EFFECT, _emit_tma_load,
    "cp.async.bulk.tensor global -> shared: the box of the tensor map at `coords` "
    "(innermost first; out-of-range elements read as zero) lands in the tile and completes "
    "its bytes on the barrier")

TMA_LOAD_MULTICAST = register_device_op(
    "tl.device.tma_load_multicast", _TMA_LOAD_EFFECT, _emit_tma_load,
    "cp.async.bulk.tensor global -> shared, multicast: the box lands in the tile at the same "
    "offset in every block of the cluster whose rank is set in `mask`, and completes its "
    "bytes on the barrier at the same offset in each of them")


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

def _emit_tma_store_wait(c):
    pending = _imm(c.args[0])
    if len(c.args) > 1 and not _imm(c.args[1]):
        return _T.ptx.cp.async_.bulk.wait_group(pending)
    return _T.ptx.cp.async_.bulk.wait_group.read(pending)


TMA_STORE_WAIT = register_device_op(
    "tl.device.tma_store_wait", Effect(waits=Mechanism.BULK_GROUP, pending_arg=0),
    _emit_tma_store_wait,
    "cp.async.bulk.wait_group.read N: at most N bulk groups still read shared memory (their "
    "tiles may be overwritten); with a second argument 0, cp.async.bulk.wait_group N: at most "
    "N bulk groups are still incomplete (the others' global writes are done)")


def tma_load(dst_addr, tensor_map_addr, bar_addr, coords) -> tirx.Call:
    """``coords``: the box's start, innermost dimension first."""
    return call(TMA_LOAD, dst_addr, tensor_map_addr, bar_addr, *coords)


def tma_load_multicast(dst_addr, tensor_map_addr, bar_addr, mask: int, coords) -> tirx.Call:
    """:func:`tma_load` delivered to every block of the cluster whose rank is set in
    ``mask``."""
    return call(TMA_LOAD_MULTICAST, dst_addr, tensor_map_addr, bar_addr,
                tirx.const(mask, "uint16"), *coords)


def tma_store(tensor_map_addr, src_addr, coords) -> tirx.Call:
    return call(TMA_STORE, tensor_map_addr, src_addr, *coords)


def tma_store_commit() -> tirx.Call:
    return call(TMA_STORE_COMMIT)


def tma_store_wait(pending: int, read: bool = True) -> tirx.Call:
    """Wait for bulk groups: ``read`` only until their shared-memory reads are done."""
    return call(TMA_STORE_WAIT, pending) if read else call(TMA_STORE_WAIT, pending, 0)
