"""Thread groups: a contiguous range of a block's threads that runs code together.

A kernel's ``threadIdx.x`` range ``[0, block)`` is the largest group; ``T.ws(i)`` names warp
group ``i`` (threads ``128 i .. 128 i + 127``).  Lowerings distribute a tile over the threads
of the group they run on (the thread's *rank* in the group is ``tx - offset``) and a barrier
among groups is a named barrier over exactly their threads.  The user's thread index keeps
its meaning: ``tx`` inside a group is still the block's ``threadIdx.x``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from ..errors import LoweringError

WARP_GROUP = 128  # threads of a warp group (4 warps)
WARP = 32
# The id BarrierIds gives a group of one warp: its barrier is the warp's own (``__syncwarp``)
WARP_BARRIER = -1
# The marker a ``T.ws`` region carries in the IR: ``AttrStmt(node, GROUP_ATTR, offset)`` whose
# body is ``if offset <= tx < offset + count: ...``; the count is the ``tl.group_count`` attr.
GROUP_ATTR = "tl.thread_group"
# Marks the body of a warp-specialized kernel's consumer region (an ``AttrStmt`` inside the
# region's condition): every write the producer group makes to a shared tile is one the
# consumers wait for (on the ring's "full" mbarriers) before their last access of that tile,
# and the producer writes no tile after the consumers have finished with it.  So once every
# consumer is past its last access of a ring tile, the tile is dead in both roles, and its
# bytes may go to a tile only the consumers use later (``PlanSharedMemory``).
CONSUMER_BODY_ATTR = "tl.ws_consumer_body"


@dataclass(frozen=True)
class ThreadGroup:
    """Threads ``offset .. offset + count - 1`` of the block."""

    offset: int
    count: int

    @property
    def end(self) -> int:
        return self.offset + self.count

    def contains(self, other: "ThreadGroup") -> bool:
        return self.offset <= other.offset and other.end <= self.end

    def union(self, other: "ThreadGroup") -> "ThreadGroup":
        """The smallest group holding both (groups are contiguous ranges)."""
        lo = min(self.offset, other.offset)
        return ThreadGroup(lo, max(self.end, other.end) - lo)

    def rank(self, tx):
        """The thread's index inside the group (``tx`` itself for a group at offset 0)."""
        return tx if self.offset == 0 else tx - self.offset

    def __str__(self) -> str:
        return f"threads {self.offset}..{self.end - 1}"


def is_one_warp(g: ThreadGroup) -> bool:
    """Whether ``g`` is exactly one whole warp of the block."""
    return g.count == WARP and g.offset % WARP == 0


def warp_groups(ids, block: int) -> ThreadGroup:
    """The group formed by warp groups ``ids`` (consecutive) of a block of ``block`` threads."""
    ids = sorted(int(i) for i in ids)
    if ids != list(range(ids[0], ids[0] + len(ids))):
        raise ValueError(f"warp groups {ids} are not consecutive")
    g = ThreadGroup(ids[0] * WARP_GROUP, len(ids) * WARP_GROUP)
    if g.end > block:
        raise ValueError(f"warp group {ids[-1]} needs threads up to {g.end - 1}, but the block "
                         f"has {block}")
    return g


class BarrierIds:
    """Named-barrier ids of one kernel.  Id 0 is the block barrier (``__syncthreads``), for
    code that every thread runs at the same place.  Every other group is a range of whole
    units of the block (warp groups; warps in a block of at most one warp group) and has a
    fixed id: the ranges of the block's ``W`` units, ordered by length and then start, are
    numbered from 1, so every pass that needs a group's barrier finds the same id without
    sharing state.  The range of all ``W`` units has an id too: it synchronizes the whole
    block from different code (the regions of two ``T.ws``), where ``__syncthreads`` must not
    be used.  A group of one whole warp needs no id: its barrier is the warp's
    (``WARP_BARRIER``).  PTX has 16 ids."""

    LIMIT = 16

    def __init__(self, block: ThreadGroup):
        self.block = block

    def of(self, group: ThreadGroup, divergent: bool = False) -> int:
        """The id of ``group``'s barrier (``divergent``: reached from different code)."""
        if group == self.block and not divergent:
            return 0
        if is_one_warp(group) and self.block.contains(group):
            return WARP_BARRIER
        unit = barrier_unit(self.block)
        if group.offset % unit or group.count % unit or not self.block.contains(group):
            raise LoweringError(f"no named barrier for {group}: thread groups are ranges of "
                                f"{'warps' if unit == WARP else 'warp groups'} ({unit} "
                                f"threads) of the block ({self.block}), or one warp")
        w = -(-self.block.count // unit)
        n = 1
        for length in range(1, w + 1):
            for start in range(0, w - length + 1):
                if (start * unit, length * unit) == (group.offset, group.count):
                    if n >= self.LIMIT:
                        raise LoweringError(f"{group} would need named barrier {n}; PTX has "
                                            f"{self.LIMIT} (0..{self.LIMIT - 1})")
                    return n
                n += 1
        raise LoweringError(f"no named barrier for {group}")


def barrier_unit(block: ThreadGroup) -> int:
    """The threads of the smallest group with a named barrier of its own: a warp in a block of
    at most one warp group (at most 10 ranges), else a warp group."""
    return WARP if block.count <= WARP_GROUP else WARP_GROUP


def is_group_range(g: ThreadGroup, block: ThreadGroup) -> bool:
    """Whether ``g`` can be a thread group of ``block``: whole barrier units, or one warp."""
    unit = barrier_unit(block)
    return g.count > 0 and block.contains(g) and (
        (g.offset % unit == 0 and g.count % unit == 0) or is_one_warp(g))


def group_of(attr) -> ThreadGroup | None:
    """The group a ``T.ws`` region's ``AttrStmt`` stands for, else ``None``."""
    if getattr(attr, "attr_key", None) != GROUP_ATTR:
        return None
    return ThreadGroup(int(attr.value), int(attr.node))


def consumer_body_of(region):
    """The ``CONSUMER_BODY_ATTR`` statement a thread-group region holds (a warp-specialized
    kernel's consumers: ``if cond: AttrStmt(CONSUMER_BODY_ATTR, body)``), else ``None``."""
    cond = region.body if group_of(region) is not None else None
    if not isinstance(cond, tirx.IfThenElse) or cond.else_case is not None:
        return None
    inner = cond.then_case
    return inner if isinstance(inner, tirx.AttrStmt) and \
        inner.attr_key == CONSUMER_BODY_ATTR else None


def with_consumer_body(region, body):
    """The consumer region ``region`` (see :func:`consumer_body_of`) with ``body`` as the
    consumers' body."""
    cond, attr = region.body, region.body.then_case
    return tirx.AttrStmt(region.node, region.attr_key, region.value, tirx.IfThenElse(
        cond.condition, tirx.AttrStmt(attr.node, attr.attr_key, attr.value, body), None))
