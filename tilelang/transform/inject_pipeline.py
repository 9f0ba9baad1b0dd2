"""``InjectSoftwarePipeline``: multi-stage buffering of ``T.Pipelined`` loops.

CUDA, ``num_stages = n >= 2``: the copies global -> shared of the loop body (the *producers*;
with ``stage=[...]`` the statements of stage 0) are issued ``n - 1`` iterations ahead into
``n`` copies of their shared tiles, as ``cp.async`` groups (one commit per iteration); the
other statements (the *consumers*) run on the stage of their own iteration:

    for s in range(n - 1):            if s < T: produce(s) -> stage s;   commit
    for k in range(T):
        wait until group k is complete; __syncthreads()
        if k + n - 1 < T: produce(k + n - 1) -> stage (k + n - 1) % n;  commit
        consume(k) on stage k % n
    wait for all groups

The barrier at the top of iteration k both publishes stage k and ends every read of stage
(k - 1) % n, the one the producers overwrite next.  ``order`` sets the order of the statements
inside an iteration; ``sync`` and ``group`` are accepted and not needed by this schedule.
A producer whose tile is also used outside the loop, or read before it is written in the body,
is not pipelined.  Trip counts smaller than ``n - 1`` and dynamic trip counts are handled by
the guards.  CPU: the loop runs as a plain loop.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.ir import Range

from ..engine.target import is_cpu
from ..language.loop import PIPELINE_KEYS
from ..ops import decode
from ..ops import region as R
from ..ops.copy import Copy
from .ir import map_nodes, StmtMutator, find_all, seq, substitute
from .lower_tile_ops import ASYNC_COPY
from .passes import function_pass, target_of

_KEYS = set(PIPELINE_KEYS.values())
SHARED = ("shared", "shared.dyn")


def _key(x):
    return x.__chandle__()


def sync_threads() -> tirx.Stmt:
    return tirx.Evaluate(tirx.call_extern("int32", "__syncthreads"))


def _call(name: str) -> tirx.Stmt:
    return tirx.Evaluate(tirx.call_extern("int32", name))


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

    def __init__(self, func_body):
        self.func_body = func_body
        self.staged: dict[int, tuple] = {}  # old key -> (old, new)

    def visit_For(self, s):
        n = int(s.annotations.get("num_stages", 0)) if "num_stages" in s.annotations else 0
        body = self(s.body)
        plain = tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding,
                         {k: v for k, v in s.annotations.items() if k not in _KEYS}, s.step)
        if n < 2:
            return plain
        stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
        stage_ann = s.annotations.get("tl_pipeline_stage")
        order_ann = s.annotations.get("tl_pipeline_order")
        if stage_ann is not None and len(stage_ann) == len(stmts):
            producer = [int(x) == 0 and max(int(y) for y in stage_ann) > 0 for x in stage_ann]
        else:
            producer = [_is_async_copy(x) for x in stmts]
        outside = _buffers_used(_without(self.func_body, s))
        for i, st in enumerate(stmts):
            if not producer[i]:
                continue
            written = _written_shared(st)
            earlier = set().union(*[_buffers_used(x) for x in stmts[:i]]) if i else set()
            if not written or written & outside or written & earlier:
                producer[i] = False
        if not any(producer):
            return plain
        remap = {}
        for i, st in enumerate(stmts):
            if producer[i]:
                for b in _written_shared_buffers(st):
                    if _key(b) not in self.staged:
                        new = tirx.decl_buffer([n] + list(b.shape), b.dtype, b.name,
                                               scope=b.scope())
                        self.staged[_key(b)] = (b, new)
                    remap[_key(b)] = self.staged[_key(b)][1]
        order = list(range(len(stmts)))
        if order_ann is not None and len(order_ann) == len(stmts):
            order = sorted(range(len(stmts)), key=lambda i: int(order_ann[i]))
        else:
            order = [i for i in order if producer[i]] + [i for i in order if not producer[i]]
        v, lo, trip = s.loop_var, s.min, s.extent
        k = tirx.Var(v.name, str(v.ty))
        ahead = n - 1

        def produce(i, it, stage):
            st = _stage_accesses(stmts[i], remap, stage)
            st = substitute(st, {v: lo + it})
            if _is_async_copy(stmts[i]):
                st = tirx.AttrStmt(tirx.const(0, "int32"), ASYNC_COPY, tirx.const(1, "int32"), st)
            return st

        prologue = []
        for it in range(ahead):
            group = [produce(i, tirx.const(it, "int32"), tirx.const(it, "int32"))
                     for i in order if producer[i]]
            prologue.append(tirx.IfThenElse(tirx.const(it, "int32") < trip, seq(group), None))
            prologue.append(_call("tl::cp_async_commit"))
        last_producer = max(p for p, i in enumerate(order) if producer[i])
        steady = [_call(f"tl::cp_async_wait<{n - 2}>"), sync_threads()]
        for p, i in enumerate(order):
            if producer[i]:
                it = k + ahead
                steady.append(tirx.IfThenElse(it < trip, produce(i, it, tirx.floormod(it, n)),
                                              None))
            else:
                st = _stage_accesses(stmts[i], remap, tirx.floormod(k, n))
                steady.append(substitute(st, {v: lo + k}))
            if p == last_producer:
                steady.append(_call("tl::cp_async_commit"))
        loop = tirx.For(k, tirx.const(0, "int32"), trip, tirx.ForKind.SERIAL, seq(steady))
        return seq(prologue + [loop, _call("tl::cp_async_wait<0>"), sync_threads()])


def _without(root, loop):
    """``root`` with ``loop`` replaced by a no-op (to see what the rest of the program uses)."""
    k = _key(loop)

    class _Drop(StmtMutator):
        def visit_For(self, s):
            if _key(s) == k:
                return tirx.Evaluate(tirx.const(0, "int32"))
            return self.generic(s)

    return _Drop()(root)


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
        return tirx.AllocBuffer(hit[1], annotations=s.annotations)


@function_pass("tl.InjectSoftwarePipeline")
def InjectSoftwarePipeline(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func.with_body(_Strip()(func.body))
    p = _Pipeline(func.body)
    body = p(func.body)
    if p.staged:
        body = _Restage(p.staged)(body)
    return func.with_body(body)
