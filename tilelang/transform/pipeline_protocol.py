"""The protocol of a pipelined loop: the synchronization that makes its schedule safe.

The loop issues the producers of iteration ``it`` into stage ``it % n`` of an ``n``-deep ring
of buffers and consumes stage ``k % n`` in iteration ``k``.  A protocol answers four
questions, each with statements to place (it may hold state of its own, e.g. barriers):

* ``produced(it, stage)``: after the producers of an iteration have been issued;
* ``acquire(it, stage)``: before the producers write a stage (it must be free);
* ``ready(k, stage)``: before the consumers of iteration ``k`` read their stage (its data
  must have landed, for every thread that reads it);
* ``release(k, stage)``: after the consumers of iteration ``k`` are done with their stage;
* ``drain()``: after the loop (nothing may stay in flight).

:class:`CpAsyncProtocol` is the sm80 protocol: producers are ``cp.async`` copies, one commit
group per iteration; ``ready`` waits until at most ``n - 2`` groups are in flight and then
synchronizes the loop's thread group, which both publishes stage ``k`` and ends every read
of the stage the producers overwrite next (so ``acquire`` and ``release`` need nothing).  An
mbarrier ring (``full[s]`` when a stage's bytes have landed, ``empty[s]`` when its consumers
are done, waits on the parity ``(it // n) % 2``) fits the same interface.
"""

from __future__ import annotations

from tvm import tirx

from ..device import sm80 as device
from ..device.thread_group import ThreadGroup
from .lower_tile_ops import ASYNC_COPY


def _stmt(call) -> tirx.Stmt:
    return tirx.Evaluate(call)


class Protocol:
    """Base: the hooks a pipelined loop calls; each returns a list of statements."""

    def __init__(self, num_stages: int, group: ThreadGroup, barrier_id: int):
        self.n, self.group, self.barrier_id = num_stages, group, barrier_id

    def producer(self, stmt: tirx.Stmt, asynchronous: bool) -> tirx.Stmt:
        """How a producer statement is issued (``asynchronous``: it may complete later)."""
        return stmt

    def acquire(self, it, stage) -> list:
        return []

    def produced(self, it, stage) -> list:
        return []

    def ready(self, k, stage) -> list:
        return []

    def release(self, k, stage) -> list:
        return []

    def drain(self) -> list:
        return []

    def group_barrier(self) -> tirx.Stmt:
        return _stmt(device.barrier(self.barrier_id, self.group.count))


class CpAsyncProtocol(Protocol):
    """cp.async commit groups with waits, and one barrier of the loop's group per iteration."""

    def producer(self, stmt, asynchronous):
        if not asynchronous:
            return stmt
        return tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_COPY, tirx.const(1, "int32"), stmt)

    def produced(self, it, stage):
        return [_stmt(device.cp_async_commit())]  # one group per iteration, even when empty

    def ready(self, k, stage):
        return [_stmt(device.cp_async_wait(self.n - 2)), self.group_barrier()]

    def drain(self):
        return [_stmt(device.cp_async_wait(0)), self.group_barrier()]
