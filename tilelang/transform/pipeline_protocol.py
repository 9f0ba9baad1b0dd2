"""The protocol of a pipelined loop: the synchronization that makes its schedule safe.

The loop issues the producers of iteration ``it`` into stage ``it % n`` of an ``n``-deep ring
of buffers and consumes stage ``k % n`` in iteration ``k``.  A protocol answers four
questions, each with statements to place (it may hold state of its own, e.g. barriers):

* ``produced(it, stage)``: after the producers of an iteration have been issued;
* ``acquire(it, stage)``: before the producers write a stage (it must be free);
* ``ready(k, stage)``: before the consumers of iteration ``k`` read their stage (its data
  must have landed, for every thread that reads it);
* ``release(k, stage)``: after the consumers of iteration ``k`` are done with their stage
  (it names the stage's tiles, declared as handed over: ``Effect.releases``, so that
  ``InjectAsyncWaits`` completes asynchronous reads of them, a wgmma group left in flight by
  ``wg_wait``, before it);
* ``drain()``: after the loop (nothing may stay in flight).

:class:`CpAsyncProtocol` is the sm80 protocol: producers are ``cp.async`` copies, one commit
group per iteration; ``ready`` waits until at most ``n - 2`` groups are in flight and then
synchronizes the loop's thread group, which both publishes stage ``k`` and ends every read
of the stage the producers overwrite next (so ``acquire`` and ``release`` need nothing).  An
mbarrier ring (``full[s]`` when a stage's bytes have landed, ``empty[s]`` when its consumers
are done, waits on the parity ``(it // n) % 2``) fits the same interface: that is
:class:`MbarrierProtocol`, for producers that are TMA copies.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..device import cluster
from ..device import sm80 as device
from ..device import tma
from ..device.thread_group import WARP_GROUP, ThreadGroup
from ..ir_utils import seq
from ..ops.copy import KERNEL_VAR, MBARRIER
from .lower_tile_ops import ASYNC_COPY, TMA_MULTICAST, TMA_PRODUCER


# Annotations ``WarpSpecialize`` puts on the two copies of a warp-specialized loop: the role
# ("producer" / "consumer"), the loop's id (shared by both copies) and the partition
# ``[consumer offset, consumer count, producer offset, producer count]``.
WS_ROLE = "tl.ws_role"
WS_LOOP = "tl.ws_loop"
WS_PARTITION = "tl.ws_partition"
# ``[blocks per cluster, [[position of a TMA copy in the loop's body, mask, ...], ...]]``: copies
# that the blocks of each group (a mask of ranks) make alike, multicast within the group (each
# block issuing a share)
WS_MULTICAST = "tl.ws_multicast"


def _stmt(call) -> tirx.Stmt:
    return tirx.Evaluate(call)


class Protocol:
    """Base: the hooks a pipelined loop calls; each returns a list of statements."""

    def __init__(self, num_stages: int, group: ThreadGroup, barrier_id: int, tiles=()):
        self.n, self.group, self.barrier_id = num_stages, group, barrier_id
        self.tiles = list(tiles)  # the staged tiles (leading dimension: the stage)

    def stage_tiles(self, slot) -> list:
        """``address_of`` of each staged tile's stage ``slot``: what ``release`` hands over."""
        return [tirx.address_of(tirx.BufferLoad(b, [slot] + [0] * (len(b.shape) - 1)))
                for b in self.tiles]

    def allocations(self) -> list:
        """Statements that declare the protocol's own state (placed before the loop)."""
        return []

    def slot(self, it):
        """The ring slot (stage buffer) of iteration ``it``."""
        if isinstance(it, tirx.IntImm):
            return tirx.const(int(it.value) % self.n, it.ty)
        return tirx.floormod(it, self.n)

    def producer(self, stmt: tirx.Stmt, asynchronous: bool, slot=None) -> tirx.Stmt:
        """How a producer statement is issued (``asynchronous``: it may complete later) into
        ``slot``."""
        return stmt

    def acquire(self, it, stage) -> list:
        return []

    def produced(self, it, stage) -> list:
        return []

    def ready(self, k, stage) -> list:
        return []

    def release(self, k, stage) -> list:
        return []

    def drain(self, trip=None) -> list:
        return []

    def group_barrier(self) -> tirx.Stmt:
        return _stmt(device.barrier(self.barrier_id, self.group.count))


class CpAsyncProtocol(Protocol):
    """cp.async commit groups with waits, and one barrier of the loop's group per iteration."""

    def producer(self, stmt, asynchronous, slot=None):
        if not asynchronous:
            return stmt
        return tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_COPY, tirx.const(1, "int32"), stmt)

    def produced(self, it, stage):
        return [_stmt(device.cp_async_commit())]  # one group per iteration, even when empty

    def ready(self, k, stage):
        return [_stmt(device.cp_async_wait(self.n - 2)), self.group_barrier()]

    def release(self, k, stage):
        # the next iteration's barrier hands the stage over; asynchronous reads of it (a wgmma
        # group left in flight) must be complete before that barrier
        return [_stmt(device.release(*self.stage_tiles(stage)))] if self.tiles else []

    def drain(self, trip=None):
        return [_stmt(device.cp_async_wait(0)), self.group_barrier()]


class MbarrierProtocol(Protocol):
    """A ring of ``n`` slots guarded by mbarriers, for producers that are TMA copies.

    ``full[s]`` (arrive count 1): the group's first thread arms it with ``arrive.expect_tx``
    of the ``nbytes`` the iteration's TMA loads bring, then issues them; the phase completes
    when they have landed.  ``empty[s]`` (arrive count: the group's threads): every thread
    arrives after consuming the slot.  Iteration ``g`` of the ring (counted over every run
    of the loop: ``g = base + it``, ``base`` a per-thread variable advanced by the trip count
    after each run, by 0 for an empty range) uses slot ``g % n``; consumers wait on ``full``
    with parity ``(g // n) & 1``, the producer waits on ``empty`` with the parity of the slot's previous
    round, ``((g // n) & 1) ^ 1``, which returns at once for a slot never used.  Trip counts
    smaller than ``n`` and dynamic ones need nothing more: a slot is armed only for an
    iteration that is issued, and only issued iterations are waited for."""

    def __init__(self, num_stages: int, group: ThreadGroup, barrier_id: int, nbytes: int,
                 rank=None, name: str = "pipe", tiles=()):
        super().__init__(num_stages, group, barrier_id, tiles)
        n = num_stages
        self.nbytes, self.rank = int(nbytes), rank
        self.full = tirx.decl_buffer([n], "uint64", f"{name}_full", scope="shared.dyn")
        self.empty = tirx.decl_buffer([n], "uint64", f"{name}_empty", scope="shared.dyn")
        self.base = tirx.decl_buffer([1], "int32", f"{name}_base", scope="local")

    @property
    def arrive_counts(self) -> tuple[list, list]:
        """(full, empty) arrive counts, one per slot."""
        return [1] * self.n, [self.group.count] * self.n

    def allocations(self):
        full, empty = self.arrive_counts
        return [tirx.AllocBuffer(self.full, annotations={MBARRIER: full}),
                tirx.AllocBuffer(self.empty, annotations={MBARRIER: empty}),
                tirx.AllocBuffer(self.base, annotations={KERNEL_VAR: 0})]

    def _g(self, it):
        return tirx.BufferLoad(self.base, [0]) + it

    def slot(self, it):
        return tirx.floormod(self._g(it), self.n)

    def _addr(self, buf, slot):
        return tirx.address_of(tirx.BufferLoad(buf, [slot]))

    def _parity(self, it):
        return tirx.bitwise_and(tirx.floordiv(self._g(it), self.n), 1)

    def producer(self, stmt, asynchronous, slot=None):
        return tirx.AttrStmt(tirx.const(0, "int32"), TMA_PRODUCER,
                             tirx.BufferLoad(self.full, [slot]), stmt)

    def acquire(self, it, slot):
        rank = self.rank if self.rank is not None else tirx.const(0, "int32")
        return [tirx.IfThenElse(rank == 0, tirx.SeqStmt([
            _stmt(tma.mbarrier_wait(self._addr(self.empty, slot),
                                    tirx.bitwise_xor(self._parity(it), 1))),
            _stmt(tma.mbarrier_arrive_expect_tx(self._addr(self.full, slot), self.nbytes)),
        ]), None)]

    def ready(self, k, slot):
        return [_stmt(tma.mbarrier_wait(self._addr(self.full, slot), self._parity(k)))]

    def release(self, k, slot):
        # the arrival hands the slot's tiles to the producer: declared, so that a wgmma group
        # still reading them is waited for first (InjectAsyncWaits)
        return [_stmt(tma.mbarrier_arrive(self._addr(self.empty, slot),
                                          *self.stage_tiles(slot)))]

    def drain(self, trip=None):
        base = tirx.BufferLoad(self.base, [0])  # an empty range (min > max) issued nothing
        return [tirx.BufferStore(self.base, base + tirx.max(trip, tirx.const(0, trip.dtype)),
                                 [0])]


class WarpSpecializedProtocol(MbarrierProtocol):
    """The mbarrier ring split between two thread groups (warp specialization): the
    ``producers`` group's first thread waits on ``empty[s]``, arms ``full[s]`` with
    ``arrive.expect_tx`` and issues the TMA loads; every thread of the ``consumers`` group
    waits on ``full[s]`` and arrives on ``empty[s]`` when done.  Arrive counts: ``full`` 1,
    ``empty`` the consumers' thread count (their warp-group count with ``elect_release``).
    Parities as in :class:`MbarrierProtocol`; each group advances its own copy of the ring
    base after the loop.

    With ``cluster_size`` blocks per cluster (some loads multicast into the slots of a group of
    blocks, the whole cluster or the blocks along some of its axes, each block issuing a share
    of their boxes), a slot is free only when the consumers of every block of the cluster are
    done with it: they arrive on ``empty[s]`` of each block of the cluster (their own, then the
    others' through ``mapa``), whose arrive count is that many times larger."""

    def __init__(self, num_stages: int, consumers: ThreadGroup, producers: ThreadGroup,
                 nbytes: int, producer_rank, name: str = "pipe", tiles=(),
                 cluster_size: int = 1):
        super().__init__(num_stages, consumers, 0, nbytes, producer_rank, name=name,
                         tiles=tiles)
        self.consumers, self.producers = consumers, producers
        self.leaders = None  # see elect_release
        self.cluster_size = cluster_size

    def elect_release(self, consumer_rank) -> None:
        """One arrival per consumer warp group (its first thread), for consumers that read the
        slot only through wgmma: after the warp group's ``wgmma.wait_group`` (executed by all of
        its threads together) none of them reads the slot any more."""
        self.leaders = tirx.floormod(consumer_rank, WARP_GROUP) == 0

    @property
    def arrive_counts(self) -> tuple[list, list]:
        per = self.consumers.count // WARP_GROUP if self.leaders is not None else \
            self.consumers.count
        return [1] * self.n, [per * self.cluster_size] * self.n

    def producer(self, stmt, asynchronous, slot=None, multicast: tuple[int, ...] = ()):
        """``multicast``: the groups of blocks (masks of ranks) among which the load is
        multicast, each block of a group issuing a share."""
        stmt = super().producer(stmt, asynchronous, slot)
        if not multicast:
            return stmt
        return tirx.AttrStmt(tvm.runtime.convert(list(multicast)), TMA_MULTICAST,
                             tirx.const(0, "int32"), stmt)

    def release(self, k, slot):
        arrive = super().release(k, slot)
        if self.cluster_size > 1:
            me = cluster.block_rank()
            addr = self._addr(self.empty, slot)
            # the consumers' reads of the slot are complete: a release at CTA scope suffices
            arrive += [tirx.IfThenElse(me != r,
                                       _stmt(cluster.mbarrier_arrive_remote_cta(addr, r)), None)
                       for r in range(self.cluster_size)]
        if self.leaders is None:
            return arrive
        return [tirx.IfThenElse(self.leaders, seq(arrive), None)]
