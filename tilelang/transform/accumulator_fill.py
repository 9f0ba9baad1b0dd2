"""``DeferAccumulatorFill``: a masked fill of a gemm's accumulator becomes a cleared gemm plus
the mask, added after it.

Expects: tile-level IR after ``ScalarBindings`` (an index held in a scalar, ``key = k * block_N +
j``, is its expression) and before ``LayoutInference``.
Guarantees: where a ``T.Parallel`` nest writes every element of a fragment ``C`` with a value
chosen by conditions among the constants 0 and +-inf (``C[i, j] = T.if_then_else(mask, 0,
-inf)``, attention's causal or sequence-end mask), does not read ``C``, and the next statement
is ``T.gemm(A, B, C)`` accumulating onto all of ``C`` (A and B of 8 or 16 bits), the two become
``T.gemm(A, B, C, clear_accum=True)`` followed by the nest adding the same values
(``C[i, j] = C[i, j] + T.if_then_else(mask, 0, -inf)``).  The result is the same: ``0 + s`` is
``s``, and ``-inf + s`` is ``-inf`` or, when the products hold ``+inf`` or NaN, NaN, either
way; the one difference is a sum of finite products that overflows (possible with bfloat16
inputs only, not float16 or float8), which stays ``-inf`` under the mask before and becomes NaN.
The added nest runs under a uniform condition: only where the mask is not 0 at every element
(bounds of each comparison over the nest's variables), so a causal mask costs nothing below the
diagonal and a sequence-end mask nothing before the last key block (where it is skipped, a
sum of -0 stays -0; the fill's +0 would have made it +0).
The gemm no longer follows register writes of its accumulator: ptxas serializes every wgmma of
a gemm whose accumulator is written just before it under a thread-dependent condition
("wgmma.mma_async instructions are serialized"), and the FlashAttention kernels mask after the
gemm for that reason.  A loop with an explicit ``order``/``stage``/``group`` schedule keeps its
statements where the schedule puts them.  Other fills (``T.clear``, constants) are left alone.
CPU: unchanged (the reference keeps the program's order).
"""

from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.sym import Analyzer, IntervalSet

from ..engine.target import is_cpu
from ..ir_utils import StmtMutator, find_all, peel_parallel, seq, uses_var
from ..language.loop import PIPELINE_KEYS
from ..ops import region as R
from ..ops.base import decode
from ..ops.gemm import Gemm, whole_matrix
from .passes import function_pass, target_of

FRAGMENT = "local.fragment"
_SCHEDULE = tuple(v for k, v in PIPELINE_KEYS.items() if k in ("order", "stage", "group"))


def _narrow_float(dtype) -> bool:
    """A float of 8 or 16 bits: sums of finite products of two of them stay finite in float32
    (bfloat16 aside, see above)."""
    return str(dtype).startswith(("float", "bfloat")) and tvm.DataType(str(dtype)).bits <= 16


def _choice(v):
    """``(condition, value if true, value if false)`` of a select (``T.if_then_else`` or
    ``Select``), else ``None``."""
    if isinstance(v, tirx.Select):
        return v.condition, v.true_value, v.false_value
    if isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and \
            v.op.name == "prim.if_then_else":
        return tuple(v.args)
    return None


def _masked_constant(v) -> bool | None:
    """``True`` when ``v`` picks among 0 and +-inf by at least one condition, ``False`` for one
    such constant, ``None`` for anything else."""
    if isinstance(v, tirx.FloatImm):
        return False if v.value == 0 or math.isinf(v.value) else None
    if isinstance(v, tirx.Cast):
        return _masked_constant(v.value)
    choice = _choice(v)
    if choice is None:
        return None
    a, b = _masked_constant(choice[1]), _masked_constant(choice[2])
    return None if a is None or b is None else True


def _mask_fill(s):
    """``(C, the nest, its store)`` when ``s`` is a ``T.Parallel`` nest filling every element of
    the fragment ``C`` with a masked 0/+-inf value that does not read ``C``; else ``None``."""
    if not isinstance(s, tirx.For) or s.kind != tirx.ForKind.PARALLEL:
        return None
    vars_, extents, body = peel_parallel(s)
    if not isinstance(body, tirx.BufferStore) or body.buffer.scope() != FRAGMENT:
        return None
    buf = body.buffer
    if len(body.indices) != len(vars_) or len(buf.shape) != len(vars_) or \
            any(not (isinstance(i, tirx.Var) and i.same_as(v))
                for i, v in zip(body.indices, vars_)) or \
            any(R.as_int(e) != R.as_int(n) or R.as_int(e) is None
                for e, n in zip(extents, buf.shape)) or \
            any(R.as_int(x.min) != 0 for x in find_all(s, tirx.For)):
        return None
    if _masked_constant(body.value) is not True or \
            find_all(body.value, tvm.ir.TensorLoad, lambda x: x.source.same_as(buf)):
        return None
    return buf, s, body


def _accumulating_gemm(s, buf) -> Gemm | None:
    op = decode(s)
    if not isinstance(op, Gemm) or op.clear_accum or not R.buffer_of(op.C).same_as(buf):
        return None
    if any(R.buffer_of(x).same_as(buf) for x in (op.A, op.B)):
        return None
    a, b = R.buffer_of(op.A), R.buffer_of(op.B)
    if not whole_matrix(op.C) or not _narrow_float(a.dtype) or not _narrow_float(b.dtype):
        return None
    return op


_AZ = Analyzer()


def _bounds(a, b, dom):
    """The interval of ``a - b`` over the nest's variables ``dom`` (its ends in terms of the
    variables outside the nest), or ``None``."""
    if not all(str(x.ty).startswith(("int", "uint")) for x in (a, b)):
        return None
    s = _AZ.int_set(a - b, dom)
    lo, hi = s.min_value, s.max_value
    for x in (lo, hi):  # unbounded (TVM's pos_inf / neg_inf), or still per element
        if any(uses_var(x, v) for v in dom) or find_all(x, tvm.ir.TensorLoad) or \
                find_all(x, tirx.Var, lambda v: v.name in ("pos_inf", "neg_inf")):
            return None
    return lo, hi


_ALWAYS = {tirx.GE: lambda lo, hi: lo >= 0, tirx.GT: lambda lo, hi: lo >= 1,
           tirx.LE: lambda lo, hi: hi <= 0, tirx.LT: lambda lo, hi: hi <= -1}
_NEVER = {tirx.GE: lambda lo, hi: hi <= -1, tirx.GT: lambda lo, hi: hi <= 0,
          tirx.LE: lambda lo, hi: lo >= 1, tirx.LT: lambda lo, hi: lo >= 0}


def _holds(c, dom, value: bool):
    """A condition outside the nest under which ``c`` is ``value`` at every element."""
    false = tirx.const(False, "bool")
    if isinstance(c, tirx.Not):
        return _holds(c.a, dom, not value)
    if isinstance(c, (tirx.And, tirx.Or)):
        x, y = _holds(c.a, dom, value), _holds(c.b, dom, value)
        both = isinstance(c, tirx.And) == value  # all-true of an And, all-false of an Or
        return tirx.And(x, y) if both else tirx.Or(x, y)
    table = _ALWAYS if value else _NEVER
    if type(c) in table:
        b = _bounds(c.a, c.b, dom)
        return table[type(c)](*b) if b is not None else false
    return false


def _zero_when(v, dom):
    """A condition outside the nest under which the masked value ``v`` is 0 at every element."""
    if isinstance(v, tirx.FloatImm):
        return tirx.const(v.value == 0, "bool")
    if isinstance(v, tirx.Cast):
        return _zero_when(v.value, dom)
    c, a, b = _choice(v)
    za, zb = _zero_when(a, dom), _zero_when(b, dom)
    return tirx.Or(tirx.Or(tirx.And(_holds(c, dom, True), za),
                           tirx.And(_holds(c, dom, False), zb)), tirx.And(za, zb))


def _added(loop, store):
    """The fill nest ``loop``, now adding its value to the fragment (same loops, same vars),
    and run only where the mask is not 0 everywhere (a causal mask's blocks below the
    diagonal, a sequence-end mask's blocks before the end): a uniform branch."""
    add = tirx.BufferStore(store.buffer, tirx.BufferLoad(store.buffer, list(store.indices)) +
                           store.value, list(store.indices))

    def rebuild(s):
        if isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
            return tirx.For(s.loop_var, s.min, s.extent, s.kind, rebuild(s.body),
                            s.thread_binding, s.annotations, s.step, span=s.span)
        return add

    vars_, extents, _ = peel_parallel(loop)
    dom = {v: IntervalSet(0, R.as_int(e) - 1) for v, e in zip(vars_, extents)}
    zero = _AZ.simplify(_zero_when(store.value, dom))
    nest = rebuild(loop)
    if isinstance(zero, tirx.IntImm):
        return nest if not zero.value else None
    return tirx.IfThenElse(tirx.Not(zero), nest, None)


class _Defer(StmtMutator):
    def __init__(self):
        self.scheduled = set()  # bodies of loops with an explicit schedule

    def visit_For(self, s):
        if any(k in s.annotations for k in _SCHEDULE):
            self.scheduled.add(s.body.__chandle__())
        return self.generic(s)

    def visit_SeqStmt(self, s):
        keep = s.__chandle__() in self.scheduled
        stmts = [self.visit(x) for x in s.seq]
        stmts = [x for x in stmts if x is not None]
        if keep:
            return seq(stmts)
        out, i = [], 0
        while i < len(stmts):
            fill = _mask_fill(stmts[i])
            op = _accumulating_gemm(stmts[i + 1], fill[0]) if fill and i + 1 < len(stmts) \
                else None
            if op is None:
                out.append(stmts[i])
                i += 1
                continue
            out.append(tirx.Evaluate(op.replace(clear_accum=True).to_call()))
            added = _added(fill[1], fill[2])
            out += [added] if added is not None else []
            i += 2
        return seq(out)


@function_pass("tl.DeferAccumulatorFill")
def DeferAccumulatorFill(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):  # the reference semantics keep the user's order
        return func
    return func.with_body(_Defer()(func.body))
