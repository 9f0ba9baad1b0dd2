"""Conditions as in C: an ``if`` or ``while`` on a number tests it against zero.

TVMScript keeps ``if M[i]:`` with ``M`` of an integer or float type as a condition of that
type, which TVM's lowering rejects with an internal check; the tile language reads it as
``M[i] != 0`` (a NaN is true, as in C)."""

from __future__ import annotations

from tvm import tirx

from ..ir_utils import StmtMutator


def _truth(cond: tirx.PrimExpr) -> tirx.PrimExpr:
    ty = cond.ty.dtype
    if ty.is_bool:
        return cond
    return tirx.NE(cond, tirx.const(0, str(ty)))


class _Conditions(StmtMutator):
    def visit_IfThenElse(self, s):
        return tirx.IfThenElse(_truth(s.condition), self(s.then_case),
                               None if s.else_case is None else self(s.else_case))

    def visit_While(self, s):
        return tirx.While(_truth(s.condition), self(s.body))


def truthy_conditions(f: tirx.PrimFunc) -> tirx.PrimFunc:
    """``f`` with each ``if`` / ``while`` condition of a number type compared with zero."""
    return f.with_body(_Conditions()(f.body))
