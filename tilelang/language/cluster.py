"""Thread block clusters in the script (CUDA sm_90 and newer): ``T.cluster_arrive``,
``T.cluster_arrive_relaxed``, ``T.cluster_wait``, ``T.cluster_sync``,
``T.block_rank_in_cluster``, ``T.alloc_cluster_barrier`` and the cluster launch control
queries ``T.clc_*`` (sm_100 and newer).  The launch itself is ``T.ClusterKernel``.

The cluster barrier is a barrier of every thread of every block of the cluster: a thread
arrives (releasing its earlier memory accesses to the cluster) and later waits (acquiring
what the others released); every thread must arrive once before waiting.  In a kernel
launched without clusters each block is a cluster of one.  The CPU backend has no clusters:
a kernel that uses any of these is a ``LoweringError`` there.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

import tvm
from tvm import tirx
from tvm.script import tirx as _T

from ..device import cluster as device
from ..errors import DSLError
from ..ops.copy import MBARRIER
from .kernel import _current


def cluster_arrive() -> tirx.PrimExpr:
    """Arrive at the cluster barrier (``barrier.cluster.arrive.release``) without waiting."""
    _current("T.cluster_arrive")
    return device.arrive()


def cluster_arrive_relaxed() -> tirx.PrimExpr:
    """Arrive at the cluster barrier without ordering this thread's earlier memory accesses
    (``barrier.cluster.arrive.relaxed``): for a barrier that only waits for the blocks to be
    running."""
    _current("T.cluster_arrive_relaxed")
    return device.arrive_relaxed()


def cluster_wait() -> tirx.PrimExpr:
    """Wait until every thread of the cluster has arrived (``barrier.cluster.wait``)."""
    _current("T.cluster_wait")
    return device.wait()


def cluster_sync() -> tirx.PrimExpr:
    """Arrive at the cluster barrier and wait for the whole cluster: every block's writes
    before it (shared memory included) are visible to every block after it."""
    _current("T.cluster_sync")
    return device.sync()


def block_rank_in_cluster() -> tirx.PrimExpr:
    """This block's rank in its cluster (``%cluster_ctarank``, int32): ``0`` to the number of
    blocks per cluster minus one, x fastest."""
    _current("T.block_rank_in_cluster")
    return device.block_rank()


def alloc_cluster_barrier(arrive_count: int | Sequence[int]):
    """mbarriers that blocks of the cluster arrive on: as ``T.alloc_barrier`` (one barrier per
    arrive count, initialized before the kernel's first statement), and in addition
    ``T.mbarrier_arrive(bar, cta_id)`` may arrive on the barrier of block ``cta_id`` of the
    cluster, and waits on it acquire at cluster scope (what the arriving blocks wrote before
    arriving is visible after the wait).  Synchronize the cluster once (``T.cluster_sync()``)
    after the allocation and before the first arrival from another block, so that every
    block's barriers are initialized."""
    counts = list(arrive_count) if isinstance(arrive_count, (list, tuple)) else [arrive_count]
    if not counts or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0
                             for c in counts):
        raise DSLError(f"T.alloc_cluster_barrier: arrive counts must be positive ints, got "
                       f"{arrive_count!r}")
    buf = _T.alloc_buffer([len(counts)], "uint64", scope="shared.dyn",
                          annotations={MBARRIER: counts, device.CLUSTER_BARRIER: 1})
    _CLUSTER_BARRIERS[buf.__chandle__()] = buf
    while len(_CLUSTER_BARRIERS) > 4096:
        _CLUSTER_BARRIERS.popitem(last=False)
    return buf


# the buffers T.alloc_cluster_barrier made (kept alive with their entries, so that a handle is
# not reused while its entry exists): their waits acquire at cluster scope
_CLUSTER_BARRIERS: "OrderedDict[int, tirx.Buffer]" = OrderedDict()


def is_cluster_barrier(buf: Any) -> bool:
    """Whether ``buf`` was allocated by ``T.alloc_cluster_barrier``."""
    hit = _CLUSTER_BARRIERS.get(buf.__chandle__()) if hasattr(buf, "__chandle__") else None
    return hit is not None and hit.same_as(buf)


def mbarrier_wait_cluster(bar_addr: Any, parity: Any) -> tirx.PrimExpr:
    """Wait on a cluster barrier's phase of parity ``parity``, acquiring at cluster scope."""
    return device.mbarrier_wait_cluster(bar_addr, parity)


def mbarrier_arrive_remote(bar_addr: Any, cta_id: Any) -> tirx.PrimExpr:
    """Arrive on the barrier at ``bar_addr`` in block ``cta_id`` of the cluster (used by
    ``T.mbarrier_arrive(bar, cta_id)``)."""
    _current("T.mbarrier_arrive")
    if isinstance(cta_id, bool) or not isinstance(cta_id, (int, tirx.PrimExpr)):
        raise DSLError(f"T.mbarrier_arrive: cta_id must be an integer (a block's rank in the "
                       f"cluster), got {cta_id!r}")
    return device.mbarrier_arrive_remote(bar_addr, cta_id)


def _address(x: Any, op: str, what: str):
    """``address_of`` the first element of a shared buffer, or of one element of it."""
    if isinstance(x, tirx.Buffer):
        x = tirx.BufferLoad(x, [0] * len(x.shape))
    if not isinstance(x, tvm.ir.TensorLoad) or not x.source.scope().startswith("shared"):
        raise DSLError(f"{op}: {what} must be a shared-memory buffer (or an element of one), "
                       f"got {x!r}")
    return tirx.address_of(x)


def _response(result: Any, op: str):
    addr = _address(result, op, "result")
    load = addr.args[0]
    if tvm.DataType(str(load.source.dtype)).bits * _elements(load.source) < 128:
        raise DSLError(f"{op}: result {load.source.name} must hold the 16-byte response "
                       f"(e.g. T.alloc_shared((4,), T.uint32))")
    return addr


def _elements(buf) -> int:
    n = 1
    for s in buf.shape:
        n *= int(s) if isinstance(s, tirx.IntImm) else 1 << 30
    return n


def clc_try_cancel(result: Any, mbarrier: Any) -> tirx.PrimExpr:
    """Ask the scheduler (sm_100+) to cancel a cluster that has not started and hand its
    block coordinates to this block: the 16-byte response lands in ``result`` (shared) as
    transaction bytes on ``mbarrier``; read it with ``T.clc_is_canceled`` and
    ``T.clc_get_first_ctaid_*`` after the barrier's phase completes."""
    op = "T.clc_try_cancel"
    return device.clc_try_cancel(_response(result, op), _address(mbarrier, op, "mbarrier"))


def clc_try_cancel_multicast(result: Any, mbarrier: Any) -> tirx.PrimExpr:
    """``T.clc_try_cancel`` whose response goes to every block of the cluster."""
    op = "T.clc_try_cancel_multicast"
    return device.clc_try_cancel(_response(result, op), _address(mbarrier, op, "mbarrier"),
                                 multicast=True)


def clc_is_canceled(result: Any) -> tirx.PrimExpr:
    """1 (int32) when the response in ``result`` canceled a cluster, else 0."""
    return device.clc_is_canceled(_response(result, "T.clc_is_canceled"))


def _first_ctaid(axis: int):
    name = f"clc_get_first_ctaid_{'xyz'[axis]}"

    def query(result: Any) -> tirx.PrimExpr:
        return device.clc_first_ctaid(axis, _response(result, f"T.{name}"))

    query.__name__ = name
    query.__doc__ = (f"The {'xyz'[axis]} block index (uint32) of the first block of the "
                     "cluster a successful response in ``result`` canceled.")
    return query


clc_get_first_ctaid_x = _first_ctaid(0)
clc_get_first_ctaid_y = _first_ctaid(1)
clc_get_first_ctaid_z = _first_ctaid(2)

__all__ = ["alloc_cluster_barrier", "block_rank_in_cluster", "clc_get_first_ctaid_x",
           "clc_get_first_ctaid_y", "clc_get_first_ctaid_z", "clc_is_canceled",
           "clc_try_cancel", "clc_try_cancel_multicast", "cluster_arrive",
           "cluster_arrive_relaxed", "cluster_sync", "cluster_wait"]
