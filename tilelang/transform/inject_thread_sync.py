"""``InjectThreadSync``: put ``__syncthreads()`` where threads of a block hand shared data
to each other.

Expects: lowered kernels (explicit shared accesses, per-thread loops from
``LowerParallelLoops``).  Guarantees: between a statement that writes a shared tile and a later
one that reads or writes it (and between a read and a later write), at block level, there is
a barrier; a loop-carried hazard gets one before the first statement of the body that
conflicts with the end of the previous iteration.  Analysis is per tile
(not per element), so it errs towards more barriers.  Barriers are only placed in
block-uniform code: never inside per-thread loops or under conditions on the thread index.
``cp.async`` is left to the pipeline's own waits and barriers.  CPU: unchanged.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..engine.target import is_cpu
from .ir import uses_var
from .passes import function_pass, target_of

SHARED = ("shared", "shared.dyn")
SYNC = "__syncthreads"


def _key(x):
    return x.__chandle__()


def sync_stmt() -> tirx.Stmt:
    return tirx.Evaluate(tirx.call_extern("int32", SYNC))


def _extern_name(stmt):
    if isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.Call) and \
            stmt.value.args and isinstance(stmt.value.args[0], tvm.ir.StringImm):
        return str(stmt.value.args[0].value)
    return None


def _is_sync(stmt) -> bool:
    return _extern_name(stmt) == SYNC


def _contains_sync(stmt) -> bool:
    hit = []

    def on_call(c):
        if c.args and isinstance(c.args[0], tvm.ir.StringImm) and str(c.args[0].value) == SYNC:
            hit.append(c)

    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, on_call))
    return bool(hit)


def _rw(stmt) -> tuple[set, set]:
    reads, writes = set(), set()

    def on_load(x):
        if x.source.scope() in SHARED:
            reads.add(_key(x.source))

    def on_store(s):
        if s.buffer.scope() in SHARED:
            writes.add(_key(s.buffer))

    def on_call(c):
        # cp.async (issued only by pipelined loops): InjectSoftwarePipeline places the waits
        # and barriers that publish and retire its stages, so it is not a hazard here.
        if c.args and isinstance(c.args[0], tvm.ir.StringImm) and \
                str(c.args[0].value).startswith("tl::cp_async<"):
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(stmt, [(tvm.ir.Call, on_call), (tvm.ir.TensorLoad, on_load),
                                   (tirx.BufferStore, on_store)], order="pre")
    return reads, writes


class _State:
    def __init__(self, r=None, w=None):
        self.r, self.w = set(r or ()), set(w or ())

    def union(self, o):
        return _State(self.r | o.r, self.w | o.w)

    def copy(self):
        return _State(self.r, self.w)


class _Sync:
    def __init__(self, thread_vars):
        self.tvars = thread_vars

    def uniform(self, expr) -> bool:
        return not any(uses_var(expr, v) for v in self.tvars)

    def block_level(self, s) -> bool:
        if isinstance(s, (tirx.SeqStmt, tirx.AttrStmt)):
            return True
        if isinstance(s, tirx.For):
            return s.kind == tirx.ForKind.SERIAL or _contains_sync(s.body)
        if isinstance(s, tirx.IfThenElse):
            return self.uniform(s.condition)
        return False

    def stmt(self, s, st: _State):
        """(new statement, state after it)."""
        if _is_sync(s):
            return s, _State()
        if isinstance(s, tirx.SeqStmt):
            out = []
            for x in s.seq:
                y, st = self.stmt(x, st)
                out.append(y)
            return tirx.SeqStmt(out), st
        if self.block_level(s) and (_contains_sync(s) or self._has_shared(s)):
            if isinstance(s, tirx.AttrStmt):
                b, st = self.stmt(s.body, st)
                return tirx.AttrStmt(s.node, s.attr_key, s.value, b), st
            if isinstance(s, tirx.IfThenElse):
                t, st_t = self.stmt(s.then_case, st.copy())
                e, st_e = (self.stmt(s.else_case, st.copy()) if s.else_case is not None
                           else (None, st))
                return tirx.IfThenElse(s.condition, t, e), st_t.union(st_e)
            if isinstance(s, tirx.For):
                _, end = self.stmt(s.body, st.copy())
                body, end = self.stmt(s.body, st.union(end))
                return (tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding,
                                 s.annotations, s.step), st.union(end))
        r, w = _rw(s)
        if (r & st.w) or (w & (st.r | st.w)):
            return tirx.SeqStmt([sync_stmt(), s]), _State(r, w)
        return s, _State(st.r | r, st.w | w)

    @staticmethod
    def _has_shared(s) -> bool:
        r, w = _rw(s)
        return bool(r or w)


def _thread_vars(body) -> list:
    out = []

    def on_attr(a):
        if a.attr_key == "thread_extent" and a.node.thread_tag.startswith("threadIdx"):
            out.append(a.node.var)

    tvm_ffi.structural_walk(body, (tirx.AttrStmt, on_attr))
    return out


@function_pass("tl.InjectThreadSync")
def InjectThreadSync(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    body, _ = _Sync(_thread_vars(func.body)).stmt(func.body, _State())
    return func.with_body(body)
