"""``CheckHostAssumptions``: a ``T.assume(cond)`` the host can evaluate is checked on every
call, before any kernel is launched.

``T.assume`` lets the compiler rely on ``cond`` (to drop bounds checks, to vectorize); a call
that breaks it would silently compute garbage.  When ``cond`` depends only on the kernel's
scalar parameters and the sizes, strides and offsets of its tensor parameters (``N % 4 == 0``
for ``A: T.Tensor((N,), ...)``), and the assume holds for the whole kernel (it is not inside a
loop or a condition), the host checks it: a call breaking it raises ``RuntimeError("Assume:
N % 4 == 0")``.  Assumptions about thread or block indices, buffer contents, loop variables or
local values stay compile-time facts only.  The assume itself is kept for the simplifier.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..ir_utils import seq
from .passes import function_pass

ASSUME = "tirx.assume"


def _host_vars(func: tirx.PrimFunc) -> set:
    """Handles of the variables the host knows at a call: scalar parameters and the shape,
    stride and offset variables of the tensor parameters."""
    known = set()
    for p in func.params:
        known.add(p.__chandle__())
    for buf in func.buffer_map.values():
        fields = list(buf.shape) + list(buf.strides or []) + [buf.elem_offset]
        for e in fields:
            if isinstance(e, tvm.ir.Var):
                known.add(e.__chandle__())
    return known


def _unconditional_assumes(body) -> list:
    """The conditions of the ``T.assume`` statements that run once per call: reached through
    sequences and attributes (the kernel launch) only, never through a loop or a branch."""
    found = []

    def visit(s):
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                visit(x)
        elif isinstance(s, tirx.AttrStmt):
            visit(s.body)
        elif isinstance(s, tirx.Evaluate) and isinstance(s.value, tvm.ir.Call) \
                and isinstance(s.value.op, tvm.ir.Op) and s.value.op.name == ASSUME:
            found.append(s.value.args[0])

    visit(body)
    return found


def _host_evaluable(cond, known: set) -> bool:
    """Whether ``cond`` is arithmetic over host-known variables only (no loads, no calls)."""
    ok = [True]

    def on_var(v):
        if v.__chandle__() not in known:
            ok[0] = False

    def on_other(_x):
        ok[0] = False

    tvm_ffi.structural_walk(cond, [(tvm.ir.Var, on_var), (tvm.ir.TensorLoad, on_other),
                                   (tvm.ir.Call, on_other)])
    return ok[0] and str(cond.ty) == "bool"


def host_assert(cond, message: str) -> tirx.AssertStmt:
    """``assert cond, RuntimeError(message)`` (TVM 0.27's constructor takes the condition
    first, whatever its Python wrapper's parameter names say)."""
    return tirx.AssertStmt(cond, tvm.ir.StringImm("RuntimeError"), [tvm.ir.StringImm(message)])


@function_pass("tl.CheckHostAssumptions")
def CheckHostAssumptions(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Host-evaluable, unconditional ``T.assume`` conditions become call-time checks."""
    if func.body is None:
        return func
    known = _host_vars(func)
    checks = [host_assert(cond, f"Assume: {cond}")
              for cond in _unconditional_assumes(func.body) if _host_evaluable(cond, known)]
    if not checks:
        return func
    return func.with_body(seq(checks + [func.body]))


__all__ = ["CheckHostAssumptions"]
