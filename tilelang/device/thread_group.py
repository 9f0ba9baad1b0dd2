"""Thread groups: a contiguous range of a block's threads that runs code together.

A kernel's ``threadIdx.x`` range ``[0, block)`` is the largest group; ``T.ws(i)`` names warp
group ``i`` (threads ``128 i .. 128 i + 127``).  Lowerings distribute a tile over the threads
of the group they run on (the thread's *rank* in the group is ``tx - offset``) and a barrier
among groups is a named barrier over exactly their threads.  The user's thread index keeps
its meaning: ``tx`` inside a group is still the block's ``threadIdx.x``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LoweringError

WARP_GROUP = 128  # threads of a warp group (4 warps)
# The marker a ``T.ws`` region carries in the IR: ``AttrStmt(node, GROUP_ATTR, offset)`` whose
# body is ``if offset <= tx < offset + count: ...``; the count is the ``tl.group_count`` attr.
GROUP_ATTR = "tl.thread_group"


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
    code that every thread runs at the same place.  Every other group is a range of warp
    groups and has a fixed id: the ranges of the block's ``W`` warp groups, ordered by length
    and then start, are numbered from 1, so every pass that needs a group's barrier finds
    the same id without sharing state.  The range of all ``W`` warp groups has an id too: it
    synchronizes the whole block from different code (the regions of two ``T.ws``), where
    ``__syncthreads`` must not be used.  PTX has 16 ids."""

    LIMIT = 16

    def __init__(self, block: ThreadGroup):
        self.block = block

    def of(self, group: ThreadGroup, divergent: bool = False) -> int:
        """The id of ``group``'s barrier (``divergent``: reached from different code)."""
        if group == self.block and not divergent:
            return 0
        if group.offset % WARP_GROUP or group.count % WARP_GROUP or \
                not self.block.contains(group):
            raise LoweringError(f"no named barrier for {group}: thread groups are ranges of "
                                f"warp groups ({WARP_GROUP} threads) of the block ({self.block})")
        w = -(-self.block.count // WARP_GROUP)
        n = 1
        for length in range(1, w + 1):
            for start in range(0, w - length + 1):
                if (start * WARP_GROUP, length * WARP_GROUP) == (group.offset, group.count):
                    if n >= self.LIMIT:
                        raise LoweringError(f"{group} would need named barrier {n}; PTX has "
                                            f"{self.LIMIT} (0..{self.LIMIT - 1})")
                    return n
                n += 1
        raise LoweringError(f"no named barrier for {group}")


def group_of(attr) -> ThreadGroup | None:
    """The group a ``T.ws`` region's ``AttrStmt`` stands for, else ``None``."""
    if getattr(attr, "attr_key", None) != GROUP_ATTR:
        return None
    return ThreadGroup(int(attr.value), int(attr.node))
