"""``InjectSoftwarePipeline``: multi-stage buffering of ``T.Pipelined`` loops, as a schedule
(``pipeline_schedule``: which statement runs at which stage and order) made safe by a protocol
(``pipeline_protocol``: today cp.async groups, waits and a barrier of the loop's thread group).

CUDA, ``num_stages = n >= 2``: the producers of the schedule (by default the global -> shared
copies of the body; with ``stage=[...]`` the statements of stage 0) are issued ``n - 1``
iterations ahead into ``n`` copies of their shared tiles; the other statements (the
*consumers*) run on the stage of their own iteration:

    for s in range(n - 1):   acquire(s); if s < T: produce(s) -> stage s;   produced(s)
    for k in range(T):
        ready(k)                               # cp.async: wait<n-2>; barrier of the group
        if k + n - 1 < T: acquire; produce(k + n - 1) -> stage (k + n - 1) % n
        produced(k + n - 1)                    # cp.async: commit (after the last producer)
        consume(k) on stage k % n; release(k)
    drain()                                    # cp.async: wait<0>; barrier

``order`` sets the order of the statements inside an iteration; an inconsistent ``order`` or
``stage`` is a ``LoweringError`` naming the loop; ``sync`` and ``group`` are accepted and not
needed by this protocol.  A producer whose tile is also used outside the loop, or read before
it is written in the body, is not pipelined.  Trip counts smaller than ``n - 1`` and dynamic
trip counts are handled by the guards.  CPU: the loop runs as a plain loop.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Range
from tvm.sym import Analyzer

import logging

from ..engine.target import is_cpu
from ..errors import LoweringError
from ..jit.effects import written_tensors
from ..language.loop import PIPELINE_KEYS
from ..ops import decode
from ..ops import region as R
from ..language.pointer import kernel_addressed
from ..language.view import view_roots
from ..ops.copy import Copy, TmaPlan, tma_enabled, tma_plan
from ..ops.gemm import Gemm, WgmmaPlan, decode_plan
from ..device.thread_group import BarrierIds, ThreadGroup, group_of
from . import pipeline_schedule as schedule
from ..ir_utils import map_kernels, map_nodes, StmtMutator, find_all, seq, substitute
from . import pass_config
from .passes import function_pass, target_of
from .inject_async_waits import STAGED
from .plan_shared_memory import fit_stages, smem_limit, staged_peak
from .pipeline_protocol import (WS_LOOP, WS_MULTICAST, WS_PARTITION, WS_ROLE, CpAsyncProtocol,
                                MbarrierProtocol, WarpSpecializedProtocol)

log = logging.getLogger("tilelang")

_KEYS = set(PIPELINE_KEYS.values()) | {WS_ROLE, WS_LOOP, WS_PARTITION}
SHARED = ("shared", "shared.dyn")


def _key(x):
    return x.__chandle__()


class _Strip(StmtMutator):
    def visit_For(self, s):
        ann = {k: v for k, v in s.annotations.items() if k not in _KEYS}
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, self(s.body), s.thread_binding,
                        ann, s.step)


def _buffers_used(node) -> set:
    out = set()
    tvm_ffi.structural_walk(node, [
        (tvm.ir.TensorLoad, lambda x: out.add(_key(x.source))),
        (tirx.BufferStore, lambda s: out.add(_key(s.buffer))),
        (tvm.ir.TensorRegion, lambda r: out.add(_key(r.source))),
    ])
    return out


def _is_async_copy(stmt) -> bool:
    op = decode(stmt) if isinstance(stmt, tirx.Evaluate) else None
    if not isinstance(op, Copy):
        return False
    if R.scope_of(op.src) != "global" or R.scope_of(op.dst) not in SHARED:
        return False
    loads = find_all(op.src.region, tvm.ir.TensorLoad)
    return not loads  # the source address must not depend on data


def _stage_accesses(node, remap: dict, stage):
    """Accesses of staged buffers get the stage as a new leading index."""

    def on_load(x):
        new = remap.get(_key(x.source))
        return tirx.BufferLoad(new, [stage] + list(x.indices)) if new is not None else x

    def on_store(s):
        new = remap.get(_key(s.buffer))
        return tirx.BufferStore(new, s.value, [stage] + list(s.indices)) if new is not None else s

    def on_region(r):
        new = remap.get(_key(r.source))
        if new is None:
            return r
        return tirx.BufferRegion(new, [Range.from_min_extent(stage, 1)] + list(r.region))

    return map_nodes(node, [(tvm.ir.TensorLoad, on_load),
                                         (tirx.BufferStore, on_store),
                                         (tvm.ir.TensorRegion, on_region)])


class _Pipeline(StmtMutator):
    """Rewrites the pipelined loops of one function; ``staged`` collects buffer remaps."""

    def __init__(self, func_body, target=None):
        self.func_body = func_body
        self.target = target
        self.config = pass_config.current()
        self.staged: dict[int, tuple] = {}  # old key -> (old, new)
        self.block: ThreadGroup | None = None
        self.group: ThreadGroup | None = None
        self.tx = None
        self.tiles = {}  # shared tile key -> annotations of its allocation
        self.kernel_addressed = kernel_addressed(func_body)
        self.kernel_written = written_tensors(func_body)
        self.roots = view_roots(func_body)  # a global view's handle -> its tensor's
        self.rings: dict[int, WarpSpecializedProtocol] = {}  # WS_LOOP id -> its ring
        for a in find_all(func_body, tirx.AllocBuffer):
            self.tiles.setdefault(_key(a.buffer), dict(a.annotations))

    def protocol_for(self, s, stmts, sched):
        """The mbarrier ring when every producer is a copy TMA can do (sm_90+), else cp.async
        groups; returns (protocol class, TMA bytes per iteration)."""
        if not tma_enabled(self.target, self.config):
            return CpAsyncProtocol, 0
        nbytes, why = 0, None
        for i in sched.producers:
            op = decode(stmts[i]) if _is_async_copy(stmts[i]) else None
            if op is None:
                why = f"statement {i} is not a global -> shared copy"
                break
            plan = tma_plan(op, self.target, self.config,
                            self.tiles.get(_key(R.buffer_of(op.dst)), {}), self.kernel_addressed,
                            kernel_written=self.kernel_written)
            if not isinstance(plan, TmaPlan):
                why = f"{R.describe(op.src)} -> {R.describe(op.dst)}: {plan}"
                break
            nbytes += plan.nbytes
        if why is not None:
            log.debug("T.Pipelined loop over %s: cp.async instead of TMA (%s)",
                      s.loop_var.name, why)
            return CpAsyncProtocol, 0
        return MbarrierProtocol, nbytes

    def visit_AttrStmt(self, s):
        g = group_of(s)
        if s.attr_key == "thread_extent" and s.node.thread_tag == "threadIdx.x" and \
                isinstance(s.value, tirx.IntImm):
            g = self.block = ThreadGroup(0, int(s.value))
            self.tx = s.node.var
        if g is None:
            return self.generic(s)
        old, self.group = self.group, g
        try:
            return self.generic(s)
        finally:
            self.group = old

    def plan(self, s, stmts) -> schedule.Schedule | None:
        """The schedule of the pipelined loop ``s`` (body ``stmts``) with the producers that can
        be issued ahead, or ``None`` when none can (the loop then runs plainly)."""
        sched = schedule.plan(s, stmts, lambda i: _is_async_copy(stmts[i]),
                              lambda i: _buffers_used(stmts[i]) if i is not None else set(),
                              lambda i: _written_shared(stmts[i]))
        outside = _buffers_used(_without(self.func_body, s))
        # global tensors the loop writes: a copy of one issued ahead would read it before the
        # iterations between write it
        in_loop = {self.roots.get(h, h) for h in written_tensors(s.body)}
        for i in list(sched.producers):
            written = _written_shared(stmts[i])
            earlier = set().union(*[_buffers_used(stmts[j]) for j in range(i)]) if i else set()
            op = decode(stmts[i])
            src = _key(R.buffer_of(op.src)) if isinstance(op, Copy) else None
            if self.roots.get(src, src) in in_loop and not _writes_own_tile(s, op, self.roots):
                log.debug("T.Pipelined loop over %s: %s is not issued ahead (the loop writes "
                          "%s)", s.loop_var.name, R.describe(op.src), R.buffer_of(op.src).name)
                sched = sched.without_producer(i)
            elif not written or written & outside or written & earlier:
                sched = sched.without_producer(i)
        return sched if sched.producers else None

    def visit_For(self, s):
        n = int(s.annotations.get("num_stages", 0)) if "num_stages" in s.annotations else 0
        body = self(s.body)
        plain = tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding,
                         {k: v for k, v in s.annotations.items() if k not in _KEYS}, s.step)
        if n < 2:
            return plain
        stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
        sched = self.plan(s, stmts)
        if sched is None:
            return plain
        if WS_ROLE in s.annotations:
            return self.rewrite_specialized(s, stmts, sched)
        sched = self.fitting(s, stmts, sched)
        if sched is None:
            return plain
        return self.rewrite(s, stmts, sched)

    def ring_bytes(self, stmts, sched: schedule.Schedule, stages: int) -> int:
        """Shared memory the kernel needs with this loop's new tiles in ``stages`` copies (the
        kernel's tiles once each, plus the copies of tiles earlier loops staged), tiles of
        disjoint lifetimes sharing bytes as PlanSharedMemory places them."""
        fresh = {_key(b): b for i in sched.producers for b in _written_shared_buffers(stmts[i])
                 if _key(b) not in self.staged}
        return staged_peak(
            self.func_body, [(old, int(new.shape[0])) for old, new in self.staged.values()] +
            [(b, stages) for b in fresh.values()])

    def fitting(self, s, stmts, sched: schedule.Schedule) -> schedule.Schedule | None:
        """``sched`` with as many stages as fit in shared memory (``None``: not even two; the
        loop runs plainly), with a debug log when that is fewer than asked."""
        if self.target is None or self.target.kind.name != "cuda":
            return sched
        limit, _ = smem_limit(self.target)
        fit = fit_stages({"ring": sched.num_stages},
                         lambda stages: self.ring_bytes(stmts, sched, stages["ring"]), limit)
        n = fit["ring"] if fit else 1
        if n != sched.num_stages:
            log.debug("T.Pipelined loop over %s: %d stages do not fit the %d bytes of shared "
                      "memory; %s", s.loop_var.name, sched.num_stages, limit,
                      f"{n} stages" if n >= 2 else "not pipelined")
        if n < 2:
            return None
        return schedule.Schedule(n, sched.stage, sched.order) if n != sched.num_stages else sched

    def stage_buffers(self, stmts, sched: schedule.Schedule) -> dict:
        """old key -> the ``num_stages``-deep copy of each tile the producers write (one copy
        per tile, shared by every loop that stages it)."""
        remap = {}
        for i in sched.producers:
            for b in _written_shared_buffers(stmts[i]):
                if _key(b) not in self.staged:
                    new = tirx.decl_buffer([sched.num_stages] + list(b.shape), b.dtype, b.name,
                                           scope=b.scope())
                    self.staged[_key(b)] = (b, new)
                remap[_key(b)] = self.staged[_key(b)][1]
        return remap

    def rewrite(self, s, stmts, sched: schedule.Schedule):
        n = sched.num_stages
        remap = self.stage_buffers(stmts, sched)
        group = self.group or self.block or ThreadGroup(0, 1)
        block = self.block or group
        kind, nbytes = self.protocol_for(s, stmts, sched)
        if kind is MbarrierProtocol:
            rank = group.rank(self.tx) if self.tx is not None else None
            proto = MbarrierProtocol(n, group, BarrierIds(block).of(group), nbytes, rank,
                                     name=f"{s.loop_var.name}_pipe", tiles=remap.values())
        else:
            proto = CpAsyncProtocol(n, group, BarrierIds(block).of(group), remap.values())
        v, lo, trip = s.loop_var, s.min, s.extent
        k = tirx.Var(v.name, str(v.ty))
        ahead = n - 1

        def produce(i, it, stage):
            st = _stage_accesses(stmts[i], remap, stage)
            st = substitute(st, {v: lo + it})
            return proto.producer(st, _is_async_copy(stmts[i]), stage)

        first = sched.producers[0]
        prologue = proto.allocations()
        for it in range(ahead):
            c = tirx.const(it, "int32")
            slot = proto.slot(c)
            group_stmts = proto.acquire(c, slot) + [produce(i, c, slot) for i in sched.producers]
            prologue.append(tirx.IfThenElse(c < trip, seq(group_stmts), None))
            prologue += proto.produced(c, slot)
        stage_k = proto.slot(k)
        steady = proto.ready(k, stage_k)
        it = k + ahead
        for p, i in enumerate(sched.order):
            if sched.is_producer(i):
                stage_it = proto.slot(it)
                acquire = proto.acquire(it, stage_it) if i == first else []
                steady.append(tirx.IfThenElse(it < trip, seq(acquire +
                                                            [produce(i, it, stage_it)]), None))
            else:
                st = _stage_accesses(stmts[i], remap, stage_k)
                steady.append(substitute(st, {v: lo + k}))
            if p == sched.last_producer_position:
                steady += proto.produced(it, proto.slot(it))
        steady += proto.release(k, stage_k)
        loop = tirx.For(k, tirx.const(0, "int32"), trip, tirx.ForKind.SERIAL, seq(steady))
        return seq(prologue + [loop] + proto.drain(trip))

    def rewrite_specialized(self, s, stmts, sched: schedule.Schedule):
        """One role of a warp-specialized loop (``WarpSpecialize`` made a producer copy and a
        consumer copy of it, with the same ``WS_LOOP`` id): the producer group runs only the
        producers, each iteration into the ring slot the empty barrier frees; the consumer
        group waits on the slot's full barrier, consumes, and arrives on its empty barrier.
        No prologue: the producer runs ahead by itself, bounded by the ring."""
        role, loop_id = str(s.annotations[WS_ROLE]), int(s.annotations[WS_LOOP])
        n = sched.num_stages
        remap = self.stage_buffers(stmts, sched)
        head = []
        proto = self.rings.get(loop_id)
        if proto is None:
            kind, nbytes = self.protocol_for(s, stmts, sched)
            if kind is not MbarrierProtocol:
                raise LoweringError(f"warp specialization of the loop over {s.loop_var.name}: "
                                    "its producers are no longer TMA copies")
            c_off, c_cnt, p_off, p_cnt = (int(x) for x in s.annotations[WS_PARTITION])
            consumers, producers = ThreadGroup(c_off, c_cnt), ThreadGroup(p_off, p_cnt)
            cluster_size = int(s.annotations[WS_MULTICAST][0]) if WS_MULTICAST in \
                s.annotations else 1
            proto = WarpSpecializedProtocol(n, consumers, producers, nbytes,
                                            producers.rank(self.tx),
                                            name=f"{s.loop_var.name}_pipe",
                                            tiles=remap.values(), cluster_size=cluster_size)
            if _reads_stages_by_wgmma_only([stmts[i] for i in sched.order
                                            if not sched.is_producer(i)], set(remap)):
                proto.elect_release(consumers.rank(self.tx))
            self.rings[loop_id] = proto
            head = proto.allocations()
        v, lo, trip = s.loop_var, s.min, s.extent
        k = tirx.Var(v.name, str(v.ty))
        slot = proto.slot(k)
        deferred = False
        if role == "producer":
            body = proto.acquire(k, slot)
            multicast = {int(pick[0]): tuple(int(m) for m in pick[1:])
                         for pick in s.annotations[WS_MULTICAST][1]} \
                if WS_MULTICAST in s.annotations else {}
            for i in sched.producers:
                st = substitute(_stage_accesses(stmts[i], remap, slot), {v: lo + k})
                body.append(proto.producer(st, True, slot, multicast=multicast.get(i, ())))
        else:
            consumers = [stmts[i] for i in sched.order if not sched.is_producer(i)]
            in_flight = _gemms_left_in_flight(consumers)
            deferred = bool(in_flight)
            consumers = [_gemm_in_flight(st) if i in in_flight else st
                         for i, st in enumerate(consumers)]
            body = proto.ready(k, slot)
            body += [substitute(_stage_accesses(st, remap, slot), {v: lo + k})
                     for st in consumers]
            if deferred:  # hand back the previous iteration's slot, once this one's is issued
                prev = k - 1
                body.append(tirx.IfThenElse(k > 0, seq(proto.release(prev, proto.slot(prev))),
                                            None))
            else:
                body += proto.release(k, slot)
        loop = tirx.For(k, tirx.const(0, "int32"), trip, tirx.ForKind.SERIAL, seq(body))
        tail = []
        if deferred:
            last = trip - 1
            tail = [tirx.IfThenElse(trip > 0, seq(proto.release(last, proto.slot(last))), None)]
        return seq(head + [loop] + tail + proto.drain(trip))


def _gemms_left_in_flight(consumers) -> set:
    """Positions of the consumer ``T.gemm`` s of a warp-specialized loop whose wgmma group may
    stay in flight to the end of the iteration and into the next: no later consumer statement
    of the iteration touches their accumulator or register operand.  When there is one, each
    ring slot goes back one iteration later (after the next iteration's wgmmas are issued).
    A GEMM main loop's gemm qualifies; in attention the second gemm (``P @ V``) does, so it
    overlaps the row sums and the next iteration's first gemm, while the first (``Q @ K``),
    whose scores the softmax reads at once, waits."""
    used_after: set = set()
    out = set()
    for i in reversed(range(len(consumers))):
        op = decode(consumers[i])
        if isinstance(op, Gemm):
            mine = {_key(R.buffer_of(op.C))}
            if R.scope_of(op.A).startswith("local"):
                mine.add(_key(R.buffer_of(op.A)))
            if not mine & used_after:
                out.add(i)
        used_after |= _buffers_used(consumers[i])
    return out


def _reads_stages_by_wgmma_only(consumers, staged: set) -> bool:
    """Whether every consumer statement that uses a staged tile is a ``T.gemm`` planned as
    wgmma (so the slot is read only by the warp groups' wgmmas)."""
    for st in consumers:
        if not _buffers_used(st) & staged:
            continue
        op = decode(st)
        if not (isinstance(op, Gemm) and op.plan and
                isinstance(decode_plan(op.plan), WgmmaPlan)):
            return False
    return True


def _gemm_in_flight(stmt):
    """A ``T.gemm`` that leaves its wgmma group in flight (``wg_wait`` at least 1): the waits
    come where its results or operands are used (``InjectAsyncWaits``)."""
    op = decode(stmt)
    if isinstance(op, Gemm) and int(op.wg_wait) < 1:
        return tirx.Evaluate(op.replace(wg_wait=1).to_call())
    return stmt


def _without(root, loop):
    """``root`` with ``loop`` replaced by a no-op (to see what the rest of the program uses);
    the other role's copy of a warp-specialized loop goes too."""
    k = _key(loop)
    ws = int(loop.annotations[WS_LOOP]) if WS_LOOP in loop.annotations else None

    class _Drop(StmtMutator):
        def visit_For(self, s):
            if _key(s) == k or (ws is not None and WS_LOOP in s.annotations and
                                int(s.annotations[WS_LOOP]) == ws):
                return tirx.Evaluate(tirx.const(0, "int32"))
            return self.generic(s)

    return _Drop()(root)


def _writes_own_tile(loop: tirx.For, op: Copy, roots: dict) -> bool:
    """Whether every write the body of ``loop`` makes to the tensor that ``op`` copies from
    lands in the tile ``op`` reads in the same iteration, and the tiles of distinct iterations
    are disjoint (an in-place update, tile by tile): then a copy issued ahead reads a tile no
    earlier iteration wrote.  Errs towards ``False``."""
    src = R.buffer_of(op.src)
    root = roots.get(_key(src), _key(src))
    mins, exts = R.mins(op.src), R.extents(op.src)
    k = loop.loop_var
    az = Analyzer()
    az.bind(k, Range.from_min_extent(loop.min, loop.extent))
    steps = [az.simplify(substitute(m, {k: k + 1}) - m) for m in mins]
    if not any(isinstance(d, tirx.IntImm) and isinstance(e, tirx.IntImm) and
               abs(int(d)) >= int(e) for d, e in zip(steps, exts)):
        return False  # the tiles of two iterations may overlap

    def same_tile(region) -> bool:
        return R.buffer_of(region).same_as(src) and all(
            az.can_prove(a == b) for a, b in zip(R.mins(region) + R.extents(region),
                                                  mins + exts))

    def inside(store, ranges) -> bool:
        sub = Analyzer()
        for v, r in ranges + [(k, Range.from_min_extent(loop.min, loop.extent))]:
            sub.bind(v, r, allow_override=True)
        return store.buffer.same_as(src) and all(
            sub.can_prove(x >= m) and sub.can_prove(x < m + e)
            for x, m, e in zip(store.indices, mins, exts))

    def ours(node) -> bool:  # whether ``node`` refers to the tensor or a view of it
        return any(roots.get(h, h) == root for h in _buffers_used(node))

    def ok(stmt, ranges) -> bool:
        if isinstance(stmt, tirx.SeqStmt):
            return all(ok(x, ranges) for x in stmt.seq)
        if isinstance(stmt, tirx.For):
            return ok(stmt.body, ranges + [(stmt.loop_var,
                                            Range.from_min_extent(stmt.min, stmt.extent))])
        if isinstance(stmt, tirx.IfThenElse):
            return ok(stmt.then_case, ranges) and (stmt.else_case is None or
                                                   ok(stmt.else_case, ranges))
        if isinstance(stmt, tirx.AttrStmt):
            return ok(stmt.body, ranges)
        if isinstance(stmt, tirx.BufferStore):
            return roots.get(_key(stmt.buffer), _key(stmt.buffer)) != root or \
                inside(stmt, ranges)
        if isinstance(stmt, tirx.Evaluate):
            tile = decode(stmt)
            if tile is None or tile.writes is None:
                return not ours(stmt)
            return all(not ours(v) or (R.is_region(v) and same_tile(v))
                       for v in (getattr(tile, f) for f in tile.writes))
        return isinstance(stmt, (tirx.AllocBuffer, tirx.DeclBuffer))

    return ok(loop.body, [])


def _written_shared_buffers(stmt) -> list:
    op = decode(stmt) if isinstance(stmt, tirx.Evaluate) else None
    if isinstance(op, Copy):
        b = R.buffer_of(op.dst)
        return [b] if b.scope() in SHARED else []
    out = {}

    def on_store(s):
        if s.buffer.scope() in SHARED:
            out.setdefault(_key(s.buffer), s.buffer)

    tvm_ffi.structural_walk(stmt, (tirx.BufferStore, on_store))
    return list(out.values())


def _written_shared(stmt) -> set:
    return {_key(b) for b in _written_shared_buffers(stmt)}


class _Restage(StmtMutator):
    def __init__(self, staged):
        self.staged = staged

    def visit_AllocBuffer(self, s):
        hit = self.staged.get(_key(s.buffer))
        if hit is None:
            return s
        # the leading dimension is the ring slot (InjectAsyncWaits tells slots apart)
        return tirx.AllocBuffer(hit[1], annotations={**s.annotations,
                                                     STAGED: int(hit[1].shape[0])})


@function_pass("tl.InjectSoftwarePipeline")
def InjectSoftwarePipeline(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func.with_body(_Strip()(func.body))
    target = target_of(func)

    def one(kernel):  # stages are fitted to each T.Kernel's own shared memory
        p = _Pipeline(kernel, target)
        body = p(kernel)
        return _Restage(p.staged)(body) if p.staged else body

    return func.with_body(map_kernels(func.body, one))
