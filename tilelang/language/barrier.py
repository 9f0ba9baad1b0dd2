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
from ..errors import DSLError
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


def mbarrier_arrive(mbarrier: Any):
    """This thread arrives on the barrier's current phase."""
    return tma.mbarrier_arrive(_barrier(mbarrier, "T.mbarrier_arrive")[0])


def mbarrier_wait_parity(mbarrier: Any, parity: Any):
    """Wait until the barrier's phase of parity ``parity`` (0 or 1) has completed; what that
    phase published (TMA bytes, writes before the arrivals) is then visible to this thread."""
    return tma.mbarrier_wait(_barrier(mbarrier, "T.mbarrier_wait_parity")[0], parity)


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


def tma_copy(src: Any, dst: Any, barrier: Any = None):
    """Start a TMA load of the global region ``src`` into the shared tile ``dst`` (the box is
    the tile; out-of-range elements read as zero): the block's first thread arrives on
    ``barrier`` expecting the tile's bytes and issues the load; no wait.  Wait with
    ``T.mbarrier_wait_parity(barrier, parity)``; a barrier used this way has arrive count 1."""
    if barrier is None:
        raise DSLError("T.tma_copy: barrier= is required (a barrier from T.alloc_barrier)")
    return tma_copy_op(src, dst, _barrier(barrier, "T.tma_copy")[1])
