"""``PingPongConsumers``: the consumer warp groups of a warp-specialized kernel take turns at
the tensor cores, as FlashAttention-3's two warp groups do.

Expects: lowered kernels after ``InjectThreadSync`` (every barrier is explicit), the consumer
body of a warp-specialized kernel marked ``CONSUMER_BODY_ATTR`` inside its thread-group region.
Guarantees: in a consumer body of ``W >= 2`` warp groups, a serial loop whose iteration issues
at least two wgmma groups (attention: ``S = Q K^T``, the softmax on registers, ``O += P V``),
and in which no barrier of any thread group lies, gets *turn barriers* (named barriers over
two warp groups, ``T_i``, one per consumer warp group):

* before the loop (when it runs at all), warp group ``W - 1`` arrives on ``T_0``: warp group 0
  takes the first turn;
* in each iteration, warp group ``i`` waits on ``T_i`` (``barrier.sync``) just before the first
  wgmma of the iteration's first group and, once that group is committed, arrives on
  ``T_{(i+1) mod W}`` (``barrier.arrive``): the groups issue their first gemm in a fixed
  rotation, so one group's softmax runs while the next group's gemm has the tensor cores;
* warp group ``W - 1`` does not pass the turn in the last iteration (nobody takes it), so that
  every barrier ends balanced: each ``T_i`` gets as many arrivals as waits.

A turn holds only wgmma issues and their commit (no wait of any kind), and the groups run the
same loop (its bounds and the conditions around it do not depend on the thread index), so a
group waiting for its turn waits for another group that can always reach the end of its own
turn: the rotation cannot deadlock.  The turn barriers take the highest ids (15, 14, ...),
above every id ``BarrierIds`` gives the block's groups; a kernel that names a barrier by an
id known only at run time, or by one of those ids, is left alone.  CPU: unchanged.
"""

from __future__ import annotations

import logging

import tvm
from tvm import tirx

from ..device.effects import Mechanism, call, device_op_of, effect_of, synchronizes
from ..device.sync import NAMED_BARRIER_ARRIVE, SYNC_NAMED, SYNC_PARTIAL
from ..device.thread_group import WARP_GROUP, BarrierIds, ThreadGroup, barrier_unit, \
    consumer_body_of, group_of, with_consumer_body
from ..engine.target import is_cpu
from ..ir_utils import StmtMutator, find_all, map_kernels, seq, thread_extent, uses_var
from .passes import function_pass, kernel_name, target_of

log = logging.getLogger("tilelang")

# the named-barrier ops a program or pass may write (the constant-id sync is counted by sync
# insertion; the other two are not)
NAMED_BARRIER_OPS = (SYNC_NAMED, SYNC_PARTIAL, NAMED_BARRIER_ARRIVE)
PAIR = 2 * WARP_GROUP  # the threads of a turn barrier: the waiting group and the arriving one


def turn_barriers(block: ThreadGroup, groups: int) -> list[int] | None:
    """The ids of the turn barriers of ``groups`` warp groups in ``block``: the highest ones,
    when they lie above every id ``BarrierIds`` can give the block's groups, else ``None``."""
    units = -(-block.count // barrier_unit(block))
    highest_group_id = units * (units + 1) // 2
    ids = [BarrierIds.LIMIT - 1 - i for i in range(groups)]
    return ids if ids[-1] > highest_group_id else None


def _issues_wgmma(s) -> bool:
    eff = effect_of(s)
    return eff is not None and eff.completes_on is Mechanism.WGMMA_GROUP


def _commits_wgmma(s) -> bool:
    eff = effect_of(s)
    return eff is not None and eff.commits is Mechanism.WGMMA_GROUP


def _first_turn(stmts: list) -> tuple[int, int] | None:
    """Positions (first wgmma, its commit) of the first wgmma group among ``stmts``, when the
    loop body issues at least two groups as statements of its own sequence."""
    commits = [i for i, s in enumerate(stmts) if _commits_wgmma(s)]
    if len(commits) < 2:
        return None
    first = next((i for i, s in enumerate(stmts[:commits[0]]) if _issues_wgmma(s)), None)
    return None if first is None else (first, commits[0])


def _barriers(node) -> list:
    """The barrier calls in ``node``: every op that makes threads wait for or signal others
    (the wgmma and mbarrier ops excepted: they wait on hardware, not on a thread group)."""
    return find_all(node, tvm.ir.Call,
                    lambda c: synchronizes(c) or device_op_of(c) in NAMED_BARRIER_OPS)


class _Turns(StmtMutator):
    """Adds the turns to the qualifying loops of one consumer body."""

    def __init__(self, tx, ids: list[int]):
        self.tx, self.ids = tx, ids
        self.group = tx // WARP_GROUP  # the consumer warp group of this thread
        self.count = 0

    def visit_IfThenElse(self, s):
        return s if uses_var(s.condition, self.tx) else self.generic(s)

    def visit_For(self, s):
        if s.kind != tirx.ForKind.SERIAL or s.thread_binding is not None or \
                uses_var(s.min, self.tx) or uses_var(s.extent, self.tx):
            return s
        stmts = list(s.body.seq) if isinstance(s.body, tirx.SeqStmt) else [s.body]
        turn = _first_turn(stmts)
        if turn is None or _barriers(s.body):
            return self.generic(s)
        first, commit = turn
        w = len(self.ids)
        mine = tirx.const(self.ids[0], "int32") - self.group  # T_i
        nxt = tirx.const(self.ids[0], "int32") - tirx.floormod(self.group + 1, w)  # T_{i+1}
        last = w - 1  # the warp group that gives warp group 0 its turns
        wait = tirx.Evaluate(call(SYNC_PARTIAL, mine, PAIR))
        passes = tirx.Or(s.loop_var < s.min + s.extent - 1, self.group != last)
        signal = tirx.IfThenElse(passes, tirx.Evaluate(call(NAMED_BARRIER_ARRIVE, nxt, PAIR)),
                                 None)
        body = seq(stmts[:first] + [wait] + stmts[first:commit + 1] + [signal] +
                   stmts[commit + 1:])
        loop = tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding,
                        s.annotations, s.step, span=s.span)
        first_turn = tirx.IfThenElse(tirx.And(self.group == last, s.extent > 0), tirx.Evaluate(
            call(NAMED_BARRIER_ARRIVE, tirx.const(self.ids[0], "int32"), PAIR)), None)
        self.count += 1
        return seq([first_turn, loop])


class _ConsumerBodies(StmtMutator):
    def __init__(self, tx, block: ThreadGroup, taken: set, name: str):
        self.tx, self.block, self.taken, self.name = tx, block, taken, name

    def visit_AttrStmt(self, s):
        inner = consumer_body_of(s)
        if inner is None:
            return self.generic(s)
        g = group_of(s)
        groups = g.count // WARP_GROUP
        if g.offset != 0 or g.count % WARP_GROUP or groups < 2:
            return s
        ids = turn_barriers(self.block, groups)
        if ids is None or self.taken & set(ids) or None in self.taken:
            log.debug("consumer ping-pong off for %s: no free named barriers for %d turns",
                      self.name, groups)
            return s
        turns = _Turns(self.tx, ids)
        body = turns(inner.body)
        if not turns.count:
            return s
        log.debug("consumer ping-pong in %s: %d warp groups take turns (barriers %s) in %d "
                  "loop(s)", self.name, groups, ids, turns.count)
        return with_consumer_body(s, body)


def _named_ids(kernel) -> set:
    """The ids of the named barriers ``kernel`` already uses (``None`` for an id known only at
    run time)."""
    out: set = set()
    for c in find_all(kernel, tvm.ir.Call, lambda c: device_op_of(c) in NAMED_BARRIER_OPS):
        a = c.args[0]
        out.add(int(a) if isinstance(a, tirx.IntImm) else None)
    return out


@function_pass("tl.PingPongConsumers")
def PingPongConsumers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    name = kernel_name(func)

    def one(kernel):
        tx, ext = thread_extent(kernel)
        if not isinstance(ext, tirx.IntImm):
            return kernel
        return _ConsumerBodies(tx, ThreadGroup(0, int(ext)), _named_ids(kernel), name)(kernel)

    return func.with_body(map_kernels(func.body, one))


__all__ = ["PingPongConsumers", "turn_barriers"]
