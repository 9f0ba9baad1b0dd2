"""``WarpSpecialize``: the *partition* of a pipeline (sm_90+): a kernel whose ``T.Pipelined``
loops load their tiles with TMA gets a producer warp group that only issues those loads,
while the user's threads become the consumers.

Expects: a CUDA kernel after ``LayoutInference`` (fragment layouts are fixed for the user's
``U`` threads), tile operators not lowered yet.  For each pipelined loop whose schedule's
producers are all copies TMA can do (``InjectSoftwarePipeline.plan`` / ``protocol_for``, the
same decisions the pipeline makes), the kernel becomes::

    threads U + 128
    <the shared tiles' allocations>
    T.ws-region threads 0..U-1 (consumers):   setmaxnreg.inc C;  <the user's body>
    T.ws-region threads U..U+127 (producer):  setmaxnreg.dec P;  <the control flow leading to
                                                                  each loop, and the loop>

Both copies of a loop carry ``WS_ROLE`` / ``WS_LOOP`` / ``WS_PARTITION``; the pipeline pass
gives the producer copy the TMA loads (waiting on "empty", arming "full" with expect_tx) and
the consumer copy the rest of the body (waiting on "full", arriving on "empty"), sharing one
mbarrier ring (``WarpSpecializedProtocol``).  ``tx`` and every index keep their meaning; the
user's code, now run by the consumer group, synchronizes with that group's named barrier (its
block barriers too: ``InjectThreadSync``).
Copies outside the loops (e.g. attention's Q tile) stay with the consumers (a synchronous TMA
load of their group).

Registers: ``P`` (default 24; ``tl.ws_producer_max_nreg`` or ``T.annotate_producer_reg_dealloc``)
and ``C`` (default 240; ``tl.ws_consumer_max_nreg`` or ``T.annotate_consumer_reg_alloc``) must
satisfy ``128 (P + W C) <= pool`` (``W = U / 128`` consumer groups; ``pool`` the registers the
block holds at launch, at most 65536) and ``P <= launch <= C``, since an increase the pool
cannot supply waits forever: numbers given explicitly that do not fit raise ``LoweringError``,
default ones are lowered to fit (or dropped, with a debug log).

Falls back to the non-specialized pipeline, with a debug log on the ``tilelang`` logger
saying why, when: ``tl.disable_warp_specialized`` is set; the kernel has explicit thread
groups, mbarriers, named or grid barriers or ``T.set_max_nreg`` (manual control); the block
is not a 1-D whole number of warp groups or would exceed 1024 threads; no pipelined loop has only TMA producers; a loop
sits under control flow the producer cannot evaluate (it reads memory, or a variable bound by
code the producer does not run) or inside another pipelined loop, or its tiles are not
allocated at the kernel's top level.  Register hints are removed on every target.

Kernel scalars on the way to a loop (``loop_range = T.min(...)``: a one-element ``local`` /
``local.var`` buffer and its store) are per-thread memory the producer does not share; the
producer recomputes one, as a binding of its own, when a single store defines it, nothing else
writes it, the store lies on the producer's path before the loop, and its value reads no memory
besides other such scalars (block indices, parameters and constants are fine).
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from ..device import cluster, registers, sync
from ..device.effects import device_op_of
from ..device.thread_group import CONSUMER_BODY_ATTR, GROUP_ATTR, WARP_GROUP, ThreadGroup
from ..engine.target import is_cpu
from ..errors import LoweringError
from ..ops import decode
from ..ops import region as R
from ..ops.copy import MBARRIER, tma_enabled
from . import pass_config
from .inject_pipeline import _Pipeline, _written_shared_buffers
from ..ir_utils import StmtMutator, find_all, launch_chain, map_nodes, seq, substitute
from .passes import function_pass, target_of
from .pipeline_protocol import WS_LOOP, WS_MULTICAST, WS_PARTITION, WS_ROLE, MbarrierProtocol
from .plan_shared_memory import fit_stages, smem_limit, staged_peak

log = logging.getLogger("tilelang")

PRODUCER_REGS, CONSUMER_REGS = 24, 240
# device ops that make a kernel manual: a named barrier's id may be the consumer group's, and
# a grid barrier waits for a producer that never reaches it
_MANUAL_OPS = (registers.SETMAXNREG, sync.SYNC_NAMED, sync.SYNC_PARTIAL,
               sync.NAMED_BARRIER_ARRIVE, sync.GRID_SYNC)
Key = pass_config.PassConfigKey


def _key(x):
    return x.__chandle__()


def _pipelined(s) -> bool:
    return isinstance(s, tirx.For) and "num_stages" in s.annotations and \
        int(s.annotations["num_stages"]) >= 2


def _body_stmts(loop) -> list:
    return list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]


def _reads_memory(e) -> bool:
    return bool(find_all(e, tvm.ir.TensorLoad))


def _reads_state(e) -> bool:
    """``e`` calls something other than a pure function (a device op such as the block's
    rank in its cluster, by its declared call effect): its value may differ between blocks
    whose variables agree."""
    pure = tirx.CallEffectKind.Pure.value

    def impure(c) -> bool:
        kind = c.op.get_attr("TCallEffectKind") if isinstance(c.op, tvm.ir.Op) else None
        return kind is None or int(kind) > pure

    return bool(find_all(e, tvm.ir.Call, impure))


SCALAR_SCOPES = ("local", "local.var")


def _scalar_definitions(body) -> dict:
    """Per-thread scalars (``x = expr``, ``T.alloc_var``: a one-element ``local`` /
    ``local.var`` buffer) that a single store defines and nothing else writes (no tile
    operator region, no address taken): buffer key -> that store."""
    stores: dict = {}
    written: set = set()
    for st in find_all(body, tirx.BufferStore):
        b = st.buffer
        if b.scope() in SCALAR_SCOPES:
            stores.setdefault(_key(b), []).append(st)
    for r in find_all(body, tvm.ir.TensorRegion):
        written.add(_key(r.source))
    for c in find_all(body, tvm.ir.Call, lambda c: isinstance(c.op, tvm.ir.Op) and
                      c.op.name == "tirx.address_of"):
        for ld in find_all(c, tvm.ir.TensorLoad):
            written.add(_key(ld.source))
    out = {}
    for k, sts in stores.items():
        b = sts[0].buffer
        one = all(isinstance(d, tirx.IntImm) and int(d) == 1 for d in b.shape)
        if len(sts) == 1 and one and k not in written:
            out[k] = sts[0]
    return out


class _StripHints(StmtMutator):
    """Removes register hints, remembering the last of each role."""

    def __init__(self):
        self.hints: dict[int, int] = {}

    def visit_Evaluate(self, s):
        h = registers.hint_of(s)
        if h is None:
            return s
        self.hints[h[0]] = h[1]
        return None


def _free_vars(node) -> list:
    out = {}

    def on_var(v):
        if isinstance(v, tirx.Var) and not is_buffer_var(v):
            out.setdefault(_key(v), v)

    tvm_ffi.structural_walk(node, (tvm.ir.Var, on_var))
    return list(out.values())


class _Skeleton:
    """The producer's program: the control flow from the kernel body to each chosen loop
    (serial loops, conditions, bindings), the loops themselves, nothing else."""

    def __init__(self, chosen: dict, defined: set, scalars: dict | None = None):
        self.chosen = chosen  # loop key -> ws id
        self.defined = set(defined)  # var keys the producer has
        self.why: dict[int, str] = {}  # ws id -> why it cannot be reached
        self.path: list = []  # control expressions on the way down
        self.producer_stmts: dict = {}  # loop key -> its producer statements (position, stmt)
        self.scalars = scalars or {}  # scalar buffer key -> its one defining store
        self.recomputed: dict = {}  # scalar buffer key -> the producer's variable for it
        self.loops: dict = {}  # key of each chosen loop as the producer has it -> ws id
        self.loop_vars: list = []  # the serial loops on the way down
        self.control: dict = {}  # ws id -> (control expressions, loop vars) on its way

    def own(self, node):
        """``node`` with the loads of the scalars the producer recomputes replaced by the
        producer's variables."""
        if not self.recomputed:
            return node
        return map_nodes(node, (tvm.ir.TensorLoad,
                                lambda ld: self.recomputed.get(_key(ld.source), ld)))

    def recompute(self, s):
        """The producer's copy of a statement that leads to no chosen loop: a binding, or a
        scalar's defining store (as a binding of a fresh variable), when its value reads no
        memory besides scalars the producer already recomputes; otherwise ``None``."""
        if isinstance(s, tirx.Bind):
            value = self.own(s.value)
            if _reads_memory(value):
                return None
            self.defined.add(_key(s.var))
            return tirx.Bind(s.var, value)
        if isinstance(s, tirx.BufferStore) and _key(s.buffer) in self.scalars and \
                self.scalars[_key(s.buffer)].same_as(s):
            value = self.own(s.value)
            if _reads_memory(value):
                return None
            var = tirx.Var(s.buffer.name, s.buffer.dtype)
            self.recomputed[_key(s.buffer)] = var
            self.defined.add(_key(var))
            return tirx.Bind(var, value)
        return None

    def build(self, s):
        if isinstance(s, tirx.For) and _key(s) in self.chosen:
            i = self.chosen[_key(s)]
            stmts = [self.own(x) for _, x in self.producer_stmts.get(_key(s), [])]
            s = self.own(s)
            self.loops[_key(s)] = i
            need = [s.min, s.extent] + self.path
            self.control[i] = (list(need), self.loop_vars + [s.loop_var])
            self.defined.add(_key(s.loop_var))
            why = self._unreachable(need + stmts)
            if why:
                self.why[i] = why
                return None
            return s
        if not any(_key(x) in self.chosen for x in find_all(s, tirx.For)):
            return self.recompute(s)
        if isinstance(s, tirx.SeqStmt):
            out = [self.build(x) for x in s.seq]
            kept = [x for x in out if x is not None and not isinstance(x, tirx.Bind)]
            return seq(out) if kept else None
        if isinstance(s, tirx.For):
            if s.kind != tirx.ForKind.SERIAL or s.thread_binding is not None or _pipelined(s):
                return self._give_up(s, f"it sits inside a {'pipelined' if _pipelined(s) else str(s.kind)} "
                                        f"loop over {s.loop_var.name}")
            lo, ext = self.own(s.min), self.own(s.extent)
            self.path += [lo, ext]
            self.loop_vars.append(s.loop_var)
            self.defined.add(_key(s.loop_var))
            body = self.build(s.body)
            del self.path[-2:]
            self.loop_vars.pop()
            return None if body is None else tirx.For(s.loop_var, lo, ext, s.kind, body,
                                                      None, {}, s.step)
        if isinstance(s, tirx.IfThenElse):
            cond = self.own(s.condition)
            self.path.append(cond)
            then = self.build(s.then_case)
            els = self.build(s.else_case) if s.else_case is not None else None
            self.path.pop()
            if then is None and els is None:
                return None
            return tirx.IfThenElse(cond, then if then is not None else seq([]), els)
        if isinstance(s, tirx.AttrStmt) and s.attr_key != GROUP_ATTR:
            body = self.build(s.body)
            return None if body is None else tirx.AttrStmt(s.node, s.attr_key, s.value, body)
        return self._give_up(s, f"it sits inside a {type(s).__name__}")

    def _give_up(self, s, why):
        for x in find_all(s, tirx.For):
            if _key(x) in self.chosen:
                self.why.setdefault(self.chosen[_key(x)], why)
        return None

    def _origin(self, e) -> str:
        """``e``, followed by the definitions of the scalars it reads down to the memory they
        read (``m; m = n; n = L[bx]``)."""
        out, seen = [str(e)], set()
        while True:
            ld = find_all(e, tvm.ir.TensorLoad)
            store = self.scalars.get(_key(ld[0].source)) if ld else None
            if store is None or _key(store.buffer) in seen:
                return "; ".join(out)
            seen.add(_key(store.buffer))
            e = store.value
            out.append(f"{store.buffer.name} = {e}")

    def _unreachable(self, exprs) -> str | None:
        for e in exprs:
            if not isinstance(e, tirx.Stmt) and _reads_memory(e):
                return f"its control flow reads memory ({self._origin(e)})"
        for e in exprs:
            for v in _free_vars(e):
                if _key(v) not in self.defined:
                    return f"it needs {v.name}, which the producer does not compute"
        return None


def _registers(user: int, hints: dict, config: dict) -> tuple[int, int | None] | None:
    """(producer, consumer) register targets (consumer ``None``: they keep what they start
    with), or ``None`` for no rebalancing."""
    if registers.NO_REBALANCE in hints:  # T.disable_warp_group_reg_alloc()
        log.debug("warp specialization: no register rebalancing (asked for)")
        return None
    threads = user + WARP_GROUP
    launch = registers.launch_registers(threads)
    pool = min(registers.REGISTER_FILE, launch * threads)
    w = user // WARP_GROUP
    p_given = hints.get(registers.PRODUCER, config.get(Key.TL_WS_PRODUCER_REGS.value))
    c_given = hints.get(registers.CONSUMER, config.get(Key.TL_WS_CONSUMER_REGS.value))
    p = registers.check_count(int(p_given), "producer registers") if p_given is not None \
        else PRODUCER_REGS
    c = registers.check_count(int(c_given), "consumer registers") if c_given is not None \
        else CONSUMER_REGS
    total = WARP_GROUP * (p + w * c)
    if c_given is None and total > pool:
        c = min(c, (pool // WARP_GROUP - p) // w // 8 * 8)
        total = WARP_GROUP * (p + w * c)
    problem = None
    if total > pool:
        problem = (f"128 x ({p} + {w} x {c}) = {total} registers exceed the {pool} a block of "
                   f"{threads} threads holds ({launch} per thread; the register file has "
                   f"{registers.REGISTER_FILE}): setmaxnreg.inc would wait forever")
    elif p > launch:
        problem = f"the producer's {p} registers are more than the {launch} it starts with"
    if problem is None:
        if c <= launch:  # the consumers already hold at least that many: no increase
            log.debug("warp specialization: the consumers keep the %d registers they start "
                      "with (asked for %d)", launch, c)
            if p_given is None:
                # nobody takes what the producer would give back, and ptxas ignores a lone
                # setmaxnreg in a block this small ("unable to determine register count")
                return None
            return p, None
        return p, c
    if p_given is not None or c_given is not None:
        raise LoweringError(f"warp specialization: {problem}; choose smaller numbers with "
                            f"tl.ws_producer_max_nreg / tl.ws_consumer_max_nreg or "
                            f"T.annotate_producer_reg_dealloc / T.annotate_consumer_reg_alloc")
    log.debug("warp specialization: no register rebalancing (%s)", problem)
    return None


class _Kernels(StmtMutator):
    def __init__(self, func, target, config):
        self.func, self.target, self.config = func, target, config
        self.params = set()
        for p in func.params:  # scalars, and buffers with their shape variables
            self.params.add(_key(p))
            if is_buffer_var(p):
                for e in list(p.shape) + list(p.strides) + [p.elem_offset]:
                    for v in _free_vars(e) if e is not None else []:
                        self.params.add(_key(v))

    def visit_AttrStmt(self, s):
        if s.attr_key != "thread_extent":
            return self.generic(s)
        chain, body = launch_chain(s)
        strip = _StripHints()
        if find_all(body, tirx.Evaluate, lambda x: registers.hint_of(x) is not None):
            body = strip(body)
        new = self.specialize(chain, body, strip.hints)
        threads, body = (None, body) if new is None else new
        for a in reversed(chain):
            value = a.value
            if threads is not None and a.attr_key == "thread_extent" and \
                    a.node.thread_tag == "threadIdx.x":
                value = tirx.const(threads, a.value.ty)
            body = tirx.AttrStmt(a.node, a.attr_key, value, body)
        return body

    def specialize(self, chain, body, hints):
        """``(threads, new body)`` of the specialized kernel, or ``None`` (logged why)."""
        loops = [x for x in find_all(body, tirx.For) if _pipelined(x)]
        if not loops:
            return None

        def off(why):
            log.debug("warp specialization off for %s: %s", self.name(), why)
            return None

        tx, user = None, None
        for a in chain:
            if a.attr_key != "thread_extent" or not a.node.thread_tag.startswith("threadIdx"):
                continue
            if a.node.thread_tag == "threadIdx.x":
                tx, user = a.node.var, a.value
            elif not (isinstance(a.value, tirx.IntImm) and int(a.value) == 1):
                return off("the block is not 1-D")
        if tx is None or not isinstance(user, tirx.IntImm):
            return off("the block's thread count is not a constant")
        user = int(user)
        if user % WARP_GROUP:
            return off(f"the block's {user} threads are not whole warp groups of 128")
        if user + WARP_GROUP > 1024:
            return off(f"a producer warp group would make {user + WARP_GROUP} threads (max 1024)")
        manual = [a for a in find_all(body, tirx.AttrStmt) if a.attr_key == GROUP_ATTR] or \
            find_all(body, tirx.AllocBuffer, lambda a: MBARRIER in a.annotations) or \
            find_all(body, tvm.ir.Call, lambda c: device_op_of(c) in _MANUAL_OPS)
        if manual:
            return off("the kernel has its own thread groups, barriers (mbarriers, named or "
                       "grid barriers) or T.set_max_nreg (manual control)")
        planner = _Pipeline(body, self.target)  # the kernel's own tiles
        planner.config = self.config
        chosen, producer_stmts, why = {}, {}, []
        for loop in loops:
            stmts = _body_stmts(loop)
            nested = [x for x in find_all(loop.body, tirx.For) if _pipelined(x)]
            if nested:
                why.append(f"loop over {loop.loop_var.name}: it contains a pipelined loop")
                continue
            sched = planner.plan(loop, stmts)
            if sched is None:
                why.append(f"loop over {loop.loop_var.name}: nothing to issue ahead")
                continue
            kind, _ = planner.protocol_for(loop, stmts, sched)
            if kind is not MbarrierProtocol:
                why.append(f"loop over {loop.loop_var.name}: its producers are not all TMA "
                           "copies")
                continue
            chosen[_key(loop)] = len(chosen)
            producer_stmts[_key(loop)] = [(i, stmts[i]) for i in sched.producers]
        stages = {}  # loop -> the stages its ring gets
        if chosen:
            stages, why_not = self.fitted_stages([x for x in loops if _key(x) in chosen],
                                                 producer_stmts, body)
            if stages is None:
                return off(why_not)
        # the producer must reach each chosen loop and own its tiles
        top = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
        hoisted = [x for x in top if isinstance(x, tirx.AllocBuffer) and
                   x.buffer.scope().startswith("shared")]
        top_tiles = {_key(a.buffer) for a in hoisted}
        for loop in loops:
            if _key(loop) not in chosen:
                continue
            for _, st in producer_stmts[_key(loop)]:
                for b in _written_shared_buffers(st):
                    if _key(b) not in top_tiles:
                        why.append(f"loop over {loop.loop_var.name}: {b.name} is not allocated "
                                   "at the kernel's top level")
                        del chosen[_key(loop)]
                        break
                if _key(loop) not in chosen:
                    break
        defined = set(self.params) | {_key(a.node.var) for a in chain
                                      if a.attr_key == "thread_extent"}
        scalars = _scalar_definitions(body)
        skel = _Skeleton(chosen, defined, scalars)
        skel.producer_stmts = producer_stmts
        rest = seq([x for x in top if not any(x.same_as(h) for h in hoisted)])
        producer = skel.build(rest)
        for i, reason in skel.why.items():
            loop = next(x for x in loops if chosen.get(_key(x)) == i)
            why.append(f"loop over {loop.loop_var.name}: {reason}")
            del chosen[_key(loop)]
        if skel.why:  # rebuild without the loops it cannot reach
            skel = _Skeleton(chosen, defined, scalars)
            skel.producer_stmts = producer_stmts
            producer = skel.build(rest)
        if not chosen or producer is None:
            return off("; ".join(why) or "no loop to specialize")
        for w in why:
            log.debug("warp specialization of %s: not specialized: %s", self.name(), w)
        multicast = self.multicast(chain, chosen, skel, producer_stmts)
        fitted = {chosen[k]: n for k, n in stages.items() if k in chosen}
        consumers = ThreadGroup(0, user)
        producers = ThreadGroup(user, WARP_GROUP)
        part = [consumers.offset, consumers.count, producers.offset, producers.count]

        def mark(stmt, role, chosen):
            def on_for(s):
                i = chosen.get(_key(s))
                if i is None:
                    return s
                ann = dict(s.annotations)
                ann.update({WS_ROLE: role, WS_LOOP: i, WS_PARTITION: part})
                if i in fitted:  # as many as fit in shared memory
                    ann["num_stages"] = fitted[i]
                if multicast.get(i):
                    ann[WS_MULTICAST] = [multicast["size"], multicast[i]]
                return tirx.For(s.loop_var, s.min, s.extent, s.kind, s.body, s.thread_binding,
                                ann, s.step)

            class _Mark(StmtMutator):
                def visit_For(self, s):
                    return on_for(s) if _key(s) in chosen else self.generic(s)

            return _Mark()(stmt)

        regs = _registers(user, hints, self.config) if _has_setmaxnreg(self.target) else None
        c_head, p_head = [], []
        if regs is not None:
            p_regs, c_regs = regs
            if c_regs is not None:
                c_head = [tirx.Evaluate(registers.setmaxnreg(c_regs, True))]
            p_head = [tirx.Evaluate(registers.setmaxnreg(p_regs, False))]
        cons = _region(consumers, tx, tirx.AttrStmt(
            tirx.const(0, "int32"), CONSUMER_BODY_ATTR, tirx.const(1, "int32"),
            seq(c_head + [mark(rest, "consumer", chosen)])))
        prod = _region(producers, tx, seq(p_head + [_fresh_loop_vars(
            mark(producer, "producer", skel.loops))]))
        log.debug("warp specialization of %s: %d consumer threads, a producer warp group "
                  "(threads %d..%d) for %d loop(s); registers %s", self.name(), user, user,
                  user + WARP_GROUP - 1, len(chosen),
                  f"producer {regs[0]}, consumers {regs[1] or 'unchanged'}" if regs
                  else "unchanged")
        # a block leaves only when no block of its cluster arrives on its barriers any more
        tail = [tirx.Evaluate(cluster.sync())] if len(multicast) > 1 else []
        return user + WARP_GROUP, seq(hoisted + [cons, prod] + tail)

    def fitted_stages(self, loops, producer_stmts: dict, body) -> tuple[dict | None, str]:
        """``({loop key: stages}, "")`` with as many stages as fit in shared memory for each
        loop's ring (``fit_stages``; logged where fewer than asked), or ``(None, why)`` when
        two each do not fit.  The producer may run ahead from the consumers' start, so its
        tiles are live from there; a tile only the consumers use after a loop may take the
        loop's ring bytes."""
        limit, _ = smem_limit(self.target)
        tiles = {_key(x): [b for _, st in producer_stmts[_key(x)]
                           for b in _written_shared_buffers(st)] for x in loops}

        def need(stages: dict) -> int:
            staged = {}  # a tile several loops stage gets the deepest of their rings
            for k, bufs in tiles.items():
                for b in bufs:
                    staged[_key(b)] = max(staged.get(_key(b), (0, b))[0], stages[k]), b
            return staged_peak(body, [(b, n) for n, b in staged.values()],
                               live_from_start=set(staged))

        asked = {_key(x): int(x.annotations["num_stages"]) for x in loops}
        stages = fit_stages(asked, need, limit)
        if stages is None:
            return None, (f"the stage rings would need {need(asked)} bytes of shared memory "
                          f"({need({k: 2 for k in asked})} with two stages each), more than "
                          f"the {limit} allowed")
        for x in loops:
            if stages[_key(x)] != asked[_key(x)]:
                log.debug("warp specialization of %s: loop over %s: %d stages do not fit the "
                          "%d bytes of shared memory; %d stages", self.name(), x.loop_var.name,
                          asked[_key(x)], limit, stages[_key(x)])
        return stages, ""

    def multicast(self, chain, chosen: dict, skel, producer_stmts: dict) -> dict:
        """In a kernel of clusters of several blocks: ``{"size": blocks per cluster, ws id:
        [[position in the loop's body of a TMA copy, mask, mask, ...], ...]}`` for the loops
        every block of the cluster runs alike, naming the copies that blocks of the cluster
        make alike and the groups of blocks (masks of ranks) that make each one alike.  The
        loop's range and the control on its way must read no memory and name only
        parameters, constants, the serial loops on the way and the block indices along which
        the cluster has one block (``T.use_swizzle`` keeps those, see ``LowerKernelLaunch``).
        A copy whose source box and destination tile, so built, also leave out the block
        index along some axes of the cluster is the same for the blocks that differ only
        along those axes: it is multicast to each such group (the whole cluster when it
        leaves out every axis of the cluster), every block of a group issuing its share of
        the boxes (``_copy_tma_producer``)."""
        dims = {tag[-1]: int(d) for tag, d in cluster.cluster_extents(chain).items()}
        shape = tuple(dims.get(axis, 1) for axis in "xyz")
        size = shape[0] * shape[1] * shape[2]
        if size == 1:
            return {}
        spread = {axis for axis, d in dims.items() if d > 1}  # the cluster's axes
        axis_of, uniform = {}, set(self.params)  # block index -> its cluster axis; the rest
        for a in chain:
            if a.attr_key == "thread_extent" and a.node.thread_tag.startswith("blockIdx."):
                axis = a.node.thread_tag[-1]
                if axis in spread:
                    axis_of[_key(a.node.var)] = axis
                else:
                    uniform.add(_key(a.node.var))

        def varies(exprs, loop_vars):
            """The cluster axes whose block index ``exprs`` name, or None when they read
            memory or state, or name a variable other than the loop variables and the block
            indices."""
            names = uniform | {_key(v) for v in loop_vars}
            found = set()
            for e in exprs:
                if _reads_memory(e) or _reads_state(e):
                    return None
                for v in _free_vars(e):
                    if _key(v) in axis_of:
                        found.add(axis_of[_key(v)])
                    elif _key(v) not in names:
                        return None
            return found

        out = {"size": size}
        for loop_key, i in chosen.items():
            control, loop_vars = skel.control.get(i, ([], []))
            if varies(control, loop_vars) != set():
                log.debug("warp specialization of %s: no TMA multicast for loop %d: its range "
                          "or the control on its way may differ between the blocks of a "
                          "cluster", self.name(), i)
                continue
            picks = []
            for pos, st in producer_stmts[loop_key]:
                copy = decode(st)
                sides = {side: varies([*R.mins(r), *R.extents(r)], loop_vars)
                         for side, r in (("source box", copy.src),
                                         ("destination tile", copy.dst))}
                if any(v is None for v in sides.values()):
                    along = set()
                else:
                    along = spread - sides["source box"] - sides["destination tile"]
                if along:
                    picks.append([pos, *cluster.rank_groups(shape, along)])
                else:
                    differs = [side for side, v in sides.items() if v != set()]
                    log.debug("warp specialization of %s: no TMA multicast for %s -> %s in loop "
                              "%d: its %s may differ between any two blocks of the cluster (a "
                              "multicast writes one tile to every block of a group)",
                              self.name(), R.describe(copy.src), R.describe(copy.dst), i,
                              " and ".join(differs))
            if picks:
                out[i] = picks
        return out

    def name(self) -> str:
        attrs = self.func.attrs
        return str(attrs["global_symbol"]) if attrs is not None and "global_symbol" in attrs \
            else "the kernel"


def _fresh_loop_vars(stmt: tirx.Stmt) -> tirx.Stmt:
    """``stmt`` with a new variable for every loop it holds: the producer's copies of the
    user's loops (a persistent kernel's loop over tiles, the pipelined loop) must not share a
    loop variable with the consumers' loops, which TVM forbids."""

    class _Rename(StmtMutator):
        def visit_For(self, s):
            s = self.generic(s)
            var = tirx.Var(s.loop_var.name, s.loop_var.dtype)
            return tirx.For(var, s.min, s.extent, s.kind, substitute(s.body, {s.loop_var: var}),
                            s.thread_binding, s.annotations, s.step, span=s.span)

    return _Rename()(stmt)


def _region(g: ThreadGroup, tx, body) -> tirx.Stmt:
    cond = tx < g.end if g.offset == 0 else tx >= g.offset
    return tirx.AttrStmt(tirx.const(g.count, "int32"), GROUP_ATTR, tirx.const(g.offset, "int32"),
                         tirx.IfThenElse(cond, body, None))


def _has_setmaxnreg(target) -> bool:
    return str(target.attrs.get("arch", "")).endswith("a")


@function_pass("tl.WarpSpecialize")
def WarpSpecialize(func: tirx.PrimFunc) -> tirx.PrimFunc:
    target = target_of(func)
    config = pass_config.current()
    disabled = bool(config.get(Key.TL_DISABLE_WARP_SPECIALIZED.value, False))
    if disabled and not is_cpu(target) and find_all(func.body, tirx.For, _pipelined):
        log.debug("warp specialization off: tl.disable_warp_specialized")
    if is_cpu(target) or disabled or not tma_enabled(target, config):
        if find_all(func.body, tirx.Evaluate, lambda s: registers.hint_of(s) is not None):
            return func.with_body(_StripHints()(func.body))
        return func
    return func.with_body(_Kernels(func, target, config)(func.body))
