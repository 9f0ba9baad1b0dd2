"""Branches on the thread index as thread groups: ``if tx < 128: ... elif tx >= 256: ...``.

A kernel may specialize its warps by hand, branching on ``T.get_thread_binding()``.  The code
of a branch taken by exactly a range of whole warp groups (of whole warps in a block of at
most 128 threads), or by one whole warp (synchronized by ``__syncwarp``), runs on that thread
group, like
``T.ws``: its tile operators, fragments and ``T.Parallel`` loops are spread over the group's
threads, its shared-memory hazards synchronize on the group's named barrier.  The range is
read off the condition's typed IR: its tests of ``tx`` are evaluated for every thread of the
enclosing group (never matched as text).

``ThreadBranches`` rewrites such an ``if`` (and its ``elif`` / ``else`` chain) into
``T.ws`` regions (``tl.thread_group`` attributes around ``if offset <= tx < end``), one per
branch, so every later pass sees the groups the way it sees ``T.ws``.  The regions of one
chain stay together under a ``tl.thread_branches`` attribute: unlike consecutive ``T.ws``
blocks they are alternatives that run at the same time, with no program order between them
(the user's barriers order them), so ``InjectThreadSync`` synchronizes each on its own group
and the chain as a whole with the code around it, never one branch with another.  A
condition that also tests something else (``tx < 128 and k > 0``) keeps that test inside the
region; then its ``else`` is not a fixed range and the ``if`` is left as written, as are
conditions whose threads are neither (``tx == 0``, ``tx < 64``, ``tx % 2``).
"""

from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm import tirx

from ..device.thread_group import GROUP_ATTR, ThreadGroup, group_of, is_group_range
from ..ir_utils import StmtMutator, seq, substitute, uses_var
from ..utils.np_eval import NotEvaluable, np_eval

# ``AttrStmt(0, BRANCHES_ATTR, 0, <the regions of one if/elif chain, in order>)``
BRANCHES_ATTR = "tl.thread_branches"


def branch_regions(attr) -> list | None:
    """The thread-group regions of a ``tl.thread_branches`` chain, else ``None``."""
    if getattr(attr, "attr_key", None) != BRANCHES_ATTR:
        return None
    body = attr.body
    return list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]


def _conjuncts(cond) -> list:
    if isinstance(cond, tirx.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _all_of(conds: list):
    out = conds[0]
    for c in conds[1:]:
        out = tirx.And(out, c)
    return out


def threads_taking(cond, tx, within: ThreadGroup) -> ThreadGroup | None:
    """The threads of ``within`` for which ``cond`` (its tests of ``tx``) holds, when they
    form one contiguous range: ``None`` when no thread does, they are not a range, or a test
    of ``tx`` also reads something else.  Tests that do not use ``tx`` are ignored (the
    caller decides what they mean).  The tests are evaluated for every thread of ``within``."""
    on_tx = [c for c in _conjuncts(cond) if uses_var(c, tx)]
    if not on_tx:
        return within
    threads = np.arange(within.offset, within.end)
    try:
        takes = np.broadcast_to(np.asarray(np_eval(_all_of(on_tx), {tx.__chandle__(): threads}),
                                           dtype=bool), threads.shape)
    except NotEvaluable:
        return None
    hit = np.flatnonzero(takes)
    if not hit.size or hit[-1] - hit[0] + 1 != hit.size:
        return None
    return ThreadGroup(int(threads[hit[0]]), int(hit.size))


def _rest(within: ThreadGroup, taken: ThreadGroup) -> ThreadGroup | None:
    """The threads of ``within`` outside ``taken`` when they form a range (else ``None``)."""
    if taken.offset == within.offset and taken.end < within.end:
        return ThreadGroup(taken.end, within.end - taken.end)
    if taken.end == within.end and taken.offset > within.offset:
        return ThreadGroup(within.offset, taken.offset - within.offset)
    return None


def region(g: ThreadGroup, tx, body: tirx.Stmt, span=None) -> tirx.Stmt:
    """``body`` as a thread-group region of ``g`` (the IR ``T.ws`` builds)."""
    cond = tirx.And(tx >= g.offset, tx < g.end) if g.offset else tx < g.end
    return tirx.AttrStmt(tirx.const(g.count, "int32"), GROUP_ATTR, tirx.const(g.offset, "int32"),
                         tirx.IfThenElse(cond, body, None, span=span), span=span)


class ThreadBranches(StmtMutator):
    """Turn the warp-group and one-warp branches of one kernel into thread-group regions (module doc).
    ``tx`` is the kernel's ``threadIdx.x``, ``block`` its threads."""

    def __init__(self, tx, block: ThreadGroup):
        self.tx, self.group, self.block = tx, block, block
        self.bound: dict = {}  # let-bound var handle -> value (``w = tx // 128``)

    def _bind(self, var, value):
        self.bound[var.__chandle__()] = (var, substitute(value, self._vmap()))

    def _vmap(self) -> dict:
        return {v: e for v, e in self.bound.values()}

    def visit_Bind(self, s):
        self._bind(s.var, s.value)
        return s

    def visit_For(self, s):
        if s.kind == tirx.ForKind.PARALLEL:
            return s  # per-element code: its conditions are per thread
        return self.generic(s)

    def visit_AttrStmt(self, s):
        g = group_of(s)
        if g is None:
            return self.generic(s)
        old, self.group = self.group, g  # a T.ws region: its if is the group's own guard
        try:
            guard = s.body
            body = self(guard.then_case)
            return tirx.AttrStmt(s.node, s.attr_key, s.value,
                                 tirx.IfThenElse(guard.condition, body, guard.else_case,
                                                 span=guard.span), span=s.span)
        finally:
            self.group = old

    def visit_IfThenElse(self, s):
        cond = substitute(s.condition, self._vmap()) if self.bound else s.condition
        if self.tx is None or not uses_var(cond, self.tx):
            return self.generic(s)
        taken = threads_taking(cond, self.tx, self.group)
        if taken is None or taken == self.group or not is_group_range(taken, self.block):
            return self.generic(s)
        uniform = [c for c, e in zip(_conjuncts(s.condition), _conjuncts(cond))
                   if not uses_var(e, self.tx)]
        rest = _rest(self.group, taken) if s.else_case is not None else None
        if s.else_case is not None and (uniform or rest is None or
                                        not is_group_range(rest, self.block)):
            return self.generic(s)  # the else branch is no fixed range of warp groups
        then = self._in(taken, s.then_case)
        if uniform:
            then = tirx.IfThenElse(_all_of(uniform), then, None, span=s.span)
        out = [region(taken, self.tx, then, s.span)]
        if s.else_case is not None:
            out += self._else_regions(rest, s.else_case, s.span)
        zero = tirx.const(0, "int32")
        return tirx.AttrStmt(zero, BRANCHES_ATTR, zero, seq(out), span=s.span)

    def _in(self, g: ThreadGroup, body):
        old, self.group = self.group, g
        try:
            return self(body)
        finally:
            self.group = old

    def _else_regions(self, g: ThreadGroup, body, span) -> list:
        """The else branch on group ``g``: the regions of an ``elif`` chain, when that is all
        it holds, else one region of ``g`` around it."""
        inner = self._in(g, body)
        regions = branch_regions(inner)
        return regions if regions is not None else [region(g, self.tx, inner, span)]


def derive_thread_groups(kernel: tirx.Stmt) -> tirx.Stmt:
    """One ``T.Kernel`` body with its warp-group branches as thread-group regions (CUDA; a
    kernel whose block is not a constant 1-D ``threadIdx.x`` range is returned unchanged)."""
    found = []
    tvm_ffi.structural_walk(kernel, (tirx.AttrStmt, lambda a: found.append(a) if
                                     a.attr_key == "thread_extent" and
                                     a.node.thread_tag.startswith("threadIdx") else None))
    xs = [a for a in found if a.node.thread_tag == "threadIdx.x"]
    others = [a for a in found if a.node.thread_tag != "threadIdx.x"]
    if len(xs) != 1 or not isinstance(xs[0].value, tirx.IntImm) or \
            any(not (isinstance(a.value, tirx.IntImm) and int(a.value) == 1) for a in others):
        return kernel
    tx = xs[0].node.var
    return ThreadBranches(tx, ThreadGroup(0, int(xs[0].value)))(kernel)
