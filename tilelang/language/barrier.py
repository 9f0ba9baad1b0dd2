"""mbarriers and TMA copies written by hand (sm_90 and newer), with the public TileLang's names
and meaning.

``T.alloc_barrier(count)`` allocates barriers in the block's shared memory (one per entry of a
list of arrive counts); before the kernel's first statement thread 0 initializes each with its
count and the block synchronizes, so every barrier is ready wherever it is used.  A barrier's
phase completes when ``count`` threads have arrived and every expected transaction byte has
landed; waits name the parity of the phase (0 for the first, flipping on every completion).
"""

from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm import tirx
from tvm.script import tirx as _T

from ..device import sm80, tma
from ..errors import DSLError, DSLTypeError
from ..ops.copy import MBARRIER, tma_copy_op


def alloc_barrier(arrive_count: int | Sequence[int]):
    """Barriers in shared memory: ``arrive_count`` (an int) gives one, a list gives one per
    entry, each expecting that many arrivals per phase.  Returns a buffer: ``bar`` (one
    barrier) or ``bars[i]``."""
    counts = list(arrive_count) if isinstance(arrive_count, (list, tuple)) else [arrive_count]
    if not counts or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0
                             for c in counts):
        raise DSLError(f"T.alloc_barrier: arrive counts must be positive ints, got "
                       f"{arrive_count!r}")
    return _T.alloc_buffer([len(counts)], "uint64", scope="shared.dyn",
                           annotations={MBARRIER: counts})


def _barrier(bar: Any, op: str):
    """The address of one barrier: ``bar`` (a one-barrier buffer) or ``bars[i]``."""
    if isinstance(bar, tirx.Buffer):
        if len(bar.shape) != 1 or not isinstance(bar.shape[0], tirx.IntImm) or \
                int(bar.shape[0]) != 1:
            raise DSLError(f"{op}: {bar.name} holds {list(bar.shape)} barriers; index it "
                           f"({bar.name}[i])")
        load = tirx.BufferLoad(bar, [0])
    elif isinstance(bar, tvm.ir.TensorLoad):
        load = bar
    else:
        raise DSLError(f"{op}: expected a barrier from T.alloc_barrier, got {bar!r}")
    if str(load.source.dtype) != "uint64" or not load.source.scope().startswith("shared"):
        raise DSLError(f"{op}: {load.source.name} is not a barrier (T.alloc_barrier)")
    return tirx.address_of(load), load


def mbarrier_arrive(mbarrier: Any, cta_id: Any = None):
    """This thread arrives on the barrier's current phase; with ``cta_id``, on the same barrier
    of block ``cta_id`` of the thread block cluster (``T.alloc_cluster_barrier``)."""
    addr = _barrier(mbarrier, "T.mbarrier_arrive")[0]
    if cta_id is not None:
        from .cluster import mbarrier_arrive_remote

        return mbarrier_arrive_remote(addr, cta_id)
    return tma.mbarrier_arrive(addr)


def mbarrier_wait_parity(mbarrier: Any, parity: Any):
    """Wait until the barrier's phase of parity ``parity`` (0 or 1) has completed; what that
    phase published (TMA bytes, writes before the arrivals) is then visible to this thread."""
    addr, load = _barrier(mbarrier, "T.mbarrier_wait_parity")
    from .cluster import is_cluster_barrier, mbarrier_wait_cluster

    if is_cluster_barrier(load.source):  # other blocks arrive on it: acquire at cluster scope
        return mbarrier_wait_cluster(addr, parity)
    return tma.mbarrier_wait(addr, parity)


def mbarrier_expect_tx(mbarrier: Any, nbytes: Any):
    """The barrier's current phase also waits for ``nbytes`` more transaction bytes (TMA
    loads completing on it); no arrival."""
    return tma.mbarrier_expect_tx(_barrier(mbarrier, "T.mbarrier_expect_tx")[0], nbytes)


def barrier_arrive(mbarrier: Any):
    """Same as ``T.mbarrier_arrive``."""
    return mbarrier_arrive(mbarrier)


def barrier_wait(mbarrier: Any, parity: Any):
    """Same as ``T.mbarrier_wait_parity``."""
    return mbarrier_wait_parity(mbarrier, parity)


def fence_proxy_async():
    """Order this thread's ordinary shared-memory accesses before its later asynchronous ones
    (TMA stores and wgmma reads of a tile it just wrote)."""
    return sm80.fence_proxy_async()


def tma_copy(src: Any, dst: Any, *, barrier: Any = None, cluster_mask: int | None = None,
             leader_scope_threads: int | None = None, eviction_policy: str | None = None,
             annotations: dict | None = None):
    """A TMA copy whose synchronization the program writes itself.

    A load (global region ``src`` -> shared tile ``dst``; the box is the tile, out-of-range
    elements read as zero): one thread of every ``leader_scope_threads`` threads (default:
    the whole thread group) adds the tile's bytes to the expected transactions of
    ``barrier``'s current phase and issues the load; nobody arrives and nobody waits.  The
    threads arrive with ``T.barrier_arrive(barrier)`` (the barrier's arrive count) and wait
    with ``T.mbarrier_wait_parity(barrier, parity)``.  A store (shared tile ``src`` ->
    global region ``dst``, no barrier): the tile goes out through TMA as one bulk group of
    the issuing thread; wait with ``T.tma_store_wait()`` before overwriting the tile.

    ``cluster_mask`` (a load in a ``T.ClusterKernel``): a bit per block rank of the cluster.
    The block of the lowest rank set multicasts the tile to every block of the mask (same
    tile offset, each block's own ``barrier`` at the same offset receives the bytes); the
    mask's other blocks issue nothing but still expect the bytes on their barrier; blocks
    outside the mask load their own tile.  That a receiving block's tile is free again
    before the next multicast into it is the program's to ensure (e.g. arrivals on the
    issuing block's barriers, ``T.mbarrier_arrive(bar, cta_id)``)."""
    op = "T.tma_copy"
    if cluster_mask is not None and (isinstance(cluster_mask, bool)
                                     or not isinstance(cluster_mask, int)
                                     or not 0 < cluster_mask < 1 << 16):
        raise DSLError(f"{op}: cluster_mask must be an int with 1 to 16 low bits set (one per "
                       f"block rank of the cluster), got {cluster_mask!r}")
    if eviction_policy not in (None, "evict_normal", "evict_first", "evict_last"):
        raise DSLError(f"{op}: unknown eviction_policy {eviction_policy!r}")
    if annotations is not None and not isinstance(annotations, dict):
        raise DSLTypeError(f"{op}: annotations must be a dict, got {annotations!r}")
    scope = leader_scope_threads
    if scope is None and annotations:
        scope = annotations.get("leader_scope_threads")
    if scope is not None:
        if isinstance(scope, bool) or not isinstance(scope, int) or scope <= 0 or scope % 32:
            raise DSLError(f"{op}: leader_scope_threads must be a positive multiple of the warp "
                           f"size (32), got {scope!r}")
    bar = None if barrier is None else _barrier(barrier, op)[1]
    return tma_copy_op(src, dst, bar, int(scope or 0), int(cluster_mask or 0))
