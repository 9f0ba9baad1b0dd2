"""``LowerParallelLoops``: map ``T.Parallel`` nests onto threads and fragments onto registers.

Expects: layouts from ``LayoutInference`` (``tl.layout`` on fragments, ``tl.loop_layout`` on
outermost ``T.Parallel`` loops), tile operators already lowered.
Guarantees: every annotated nest becomes ``for r in T.unroll(R): <body at inverse(tx, r)>``
(innermost register digits vectorized where the lowering asked for it), guarded where the
layout pads the tile; writes to shared/global memory inside a replicated layout are done by one
replica only; every fragment becomes a per-thread ``local`` array of its register count and
every access is rewritten to its register.  Each fragment access in a loop whose indices are
functions of the loop variables is checked over every (thread, register): the element must
live in the thread that computes it, else ``LoweringError``.  A statement outside any
``T.Parallel`` loop that touches fragment elements runs on the thread that owns them.
CPU: unchanged.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from ..engine.target import is_cpu
from ..errors import LoweringError
from ..layout import codec
from ..layout.fragment import REG, Fragment, check_ownership
from .ir import map_nodes, StmtMutator, peel_parallel, substitute
from .layout_inference import FRAGMENT, key
from .np_eval import NotEvaluable, np_eval
from .passes import function_pass, target_of

VECTORIZE = "tl.vectorize"
PARTITIONED = "tl.partitioned"  # marks the per-thread register loop a T.Parallel nest became


class _Kernel(StmtMutator):
    """Rewrites one kernel body; ``tx`` is its threadIdx.x."""

    def __init__(self, tx):
        self.tx = tx
        self.frags: dict[int, tuple] = {}  # key -> (buffer, layout, local buffer)

    # fragments ----------------------------------------------------------------------------
    def visit_AllocBuffer(self, s):
        b = s.buffer
        if b.scope() != FRAGMENT:
            return s
        if "tl.layout" not in s.annotations:
            raise LoweringError(f"fragment {b.name} has no layout (run LayoutInference)")
        lay = codec.decode(s.annotations["tl.layout"])
        local = tirx.decl_buffer([lay.num_regs], b.dtype, b.name, scope="local")
        self.frags[key(b)] = (b, lay, local)
        return tirx.AllocBuffer(local)

    # loops --------------------------------------------------------------------------------
    def visit_For(self, s):
        if s.kind != tirx.ForKind.PARALLEL or "tl.loop_layout" not in s.annotations:
            return self.generic(s)
        return self.partition(s, codec.decode(s.annotations["tl.loop_layout"]))

    def partition(self, loop, lay: Fragment):
        vars_, exts, body = peel_parallel(loop)
        body = self(body)  # nested statements (serial loops inside) first
        ext = [int(e) for e in exts]
        if ext != list(lay.shape):
            raise LoweringError(f"T.Parallel loop over {ext} got a layout of shape {lay.shape}")
        vec = int(loop.annotations.get(VECTORIZE, 1))
        inner = lay.dims[-1][-1] if lay.dims and lay.dims[-1] else None
        if not (vec > 1 and inner is not None and inner.kind == REG and inner.stride == 1
                and inner.extent % vec == 0 and lay.num_regs % vec == 0):
            vec = 1
        r = tirx.Var("r", "int32")
        idx = lay.inverse(self.tx, r)
        vmap = {v: e for v, e in zip(vars_, idx)}
        body = self.localize(body, vars_, lay, r)
        body = substitute(body, vmap)
        guards = [e < x for e, x, p in zip(idx, ext, lay.padded_shape) if p != x]
        if lay.replicas:
            body = _guard_side_effects(body, lay.replica_index(self.tx) == 0, self.local_keys())
        a = Analyzer()
        if vec > 1:
            ro, rv = tirx.Var("ro", "int32"), tirx.Var("rv", "int32")
            body = substitute(body, {r: ro * vec + rv})
            guards = [substitute(g, {r: ro * vec}) for g in guards]
            stmt = _guarded(guards, tirx.For(rv, tirx.const(0, "int32"), vec,
                                             tirx.ForKind.VECTORIZED, body))
            return tirx.For(ro, tirx.const(0, "int32"), lay.num_regs // vec,
                            tirx.ForKind.UNROLLED, stmt, annotations={PARTITIONED: 1})
        stmt = _guarded([a.simplify(g) for g in guards], body)
        return tirx.For(r, tirx.const(0, "int32"), lay.num_regs, tirx.ForKind.UNROLLED, stmt,
                        annotations={PARTITIONED: 1})

    def local_keys(self) -> set:
        return {key(v[2]) for v in self.frags.values()}

    def localize(self, body, loop_vars, loop_lay: Fragment, r):
        """Rewrite fragment accesses inside a loop partitioned by ``loop_lay`` (before the loop
        vars are substituted), checking each element lives in the computing thread."""
        vkeys = [key(v) for v in loop_vars]

        def reg_of(buf, indices):
            b, lay, local = self.frags[key(buf)]
            self.check(b, lay, indices, loop_vars, loop_lay)
            pos = _positions(indices, vkeys)
            reg = _matched_reg(lay, loop_lay, pos, r) if pos is not None else None
            if reg is None:
                idx = loop_lay.inverse(self.tx, r)
                reg = Analyzer().simplify(lay.forward_reg(
                    [substitute(e, dict(zip(loop_vars, idx))) for e in indices]))
                reg = _strip_tx(reg, self.tx)
            return local, reg

        return _rewrite_fragments(body, self.frags, reg_of)

    def check(self, buf, lay, indices, loop_vars, loop_lay):
        shown = ", ".join(str(e) for e in indices)

        def index_fn(idx_arrays):
            env = {key(v): a for v, a in zip(loop_vars, idx_arrays)}
            try:
                return [np_eval(e, env) for e in indices]
            except NotEvaluable as what:
                raise LoweringError(
                    f"fragment {buf.name}[{shown}] is indexed by {what} inside a T.Parallel "
                    "loop; a fragment index may only depend on the loop's own variables "
                    "(stage the data in shared memory for other access patterns)") from None

        if not check_ownership(loop_lay, lay, index_fn):
            raise LoweringError(
                f"fragment {buf.name}[{shown}] is read or written in a T.Parallel loop whose "
                f"layout {loop_lay} puts that work on threads that do not hold the element "
                f"(fragment layout {lay})")


def _positions(indices, vkeys):
    pos = []
    for e in indices:
        if not isinstance(e, tvm.ir.Var) or key(e) not in vkeys:
            return None
        pos.append(vkeys.index(key(e)))
    return pos


def _matched_reg(lay: Fragment, loop_lay: Fragment, pos: list, r):
    """Register of a fragment element addressed by loop vars, read off the loop's register
    digits when the fragment's dims are digit-for-digit the loop's dims ``pos``."""
    reg = tirx.const(0, "int32")
    for d, p in enumerate(pos):
        fa, la = lay.dims[d], loop_lay.dims[p]
        if [(x.extent, x.kind) for x in fa] != [(x.extent, x.kind) for x in la]:
            return None
        for x, y in zip(fa, la):
            if x.kind == REG:
                reg = reg + tirx.floormod(tirx.floordiv(r, y.stride), y.extent) * x.stride
    return Analyzer().simplify(reg)


def _strip_tx(reg, tx):
    from .ir import uses_var

    if uses_var(reg, tx):
        raise LoweringError(f"register index {reg} of a fragment depends on the thread index; "
                            "the access pattern does not match the fragment's layout")
    return reg


def _rewrite_fragments(body, frags: dict, reg_of):
    def on_load(x):
        if key(x.source) in frags:
            local, reg = reg_of(x.source, list(x.indices))
            return tirx.BufferLoad(local, [reg])
        return x

    def on_store(s):
        if key(s.buffer) in frags:
            local, reg = reg_of(s.buffer, list(s.indices))
            return tirx.BufferStore(local, s.value, [reg])
        return s

    return map_nodes(body, [(tvm.ir.TensorLoad, on_load),
                                         (tirx.BufferStore, on_store)])


def _guarded(conds, stmt):
    conds = [c for c in conds if not (isinstance(c, tirx.IntImm) and int(c) == 1)]
    if not conds:
        return stmt
    cond = conds[0]
    for c in conds[1:]:
        cond = tirx.And(cond, c)
    return tirx.IfThenElse(cond, stmt, None)


def _guard_side_effects(body, cond, local_keys: set):
    """Only replica 0 writes memory other threads can see."""

    class _G(StmtMutator):
        def visit_BufferStore(self, s):
            if key(s.buffer) in local_keys or s.buffer.scope() in ("local", "local.var"):
                return s
            return tirx.IfThenElse(cond, s, None)

        def visit_Evaluate(self, s):
            call = s.value
            if isinstance(call, tvm.ir.Call) and call.args and \
                    isinstance(call.args[0], tvm.ir.StringImm) and \
                    any(w in str(call.args[0].value) for w in ("atomic", "cp_async")):
                return tirx.IfThenElse(cond, s, None)
            return s

    return _G()(body)


class _OwnerGuard(StmtMutator):
    """A store outside every ``T.Parallel`` loop that touches fragment elements is made by the
    threads that hold them (one of them when it writes memory other threads see)."""

    def __init__(self, frags: dict, tx):
        self.frags, self.tx = frags, tx

    def visit_For(self, s):
        if PARTITIONED in s.annotations:
            return s  # already per thread
        return self.generic(s)

    def visit_BufferStore(self, s):
        hits = []
        tvm_ffi.structural_walk(s.value, (tvm.ir.TensorLoad, lambda x: hits.append(
            (x.source, list(x.indices))) if key(x.source) in self.frags else None))
        target_is_frag = key(s.buffer) in self.frags
        if target_is_frag:
            hits.insert(0, (s.buffer, list(s.indices)))
        if not hits:
            return s
        conds = []
        for buf, idx in hits:
            lay = self.frags[key(buf)][1]
            thread = lay.forward(idx)[0]
            conds.append(_without_replicas(self.tx, lay) == thread)
        if not target_is_frag and s.buffer.scope() not in ("local", "local.var"):
            conds.append(self.frags[key(hits[0][0])][1].replica_index(self.tx) == 0)
        return _guarded([Analyzer().simplify(c) for c in conds], s)


def _without_replicas(tx, lay: Fragment):
    v = tx
    for x in lay.replicas:
        v = v - tirx.floormod(tirx.floordiv(tx, x.stride), x.extent) * x.stride
    return v


def _thread_var(body):
    found = []

    def on_attr(a):
        if a.attr_key == "thread_extent" and a.node.thread_tag == "threadIdx.x":
            found.append(a.node.var)

    tvm_ffi.structural_walk(body, (tirx.AttrStmt, on_attr))
    return found[0] if found else None


@function_pass("tl.LowerParallelLoops")
def LowerParallelLoops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    tx = _thread_var(func.body)
    if tx is None:
        return func
    k = _Kernel(tx)
    body = k(func.body)
    # fragment accesses outside any loop (gemm operands, constant-index reads)
    body = _OwnerGuard(k.frags, tx)(body)
    body = _rewrite_fragments(
        body, k.frags,
        lambda buf, idx: (k.frags[key(buf)][2],
                          Analyzer().simplify(k.frags[key(buf)][1].forward_reg(idx))))
    return func.with_body(body)


__all__ = ["LowerParallelLoops", "VECTORIZE"]
