"""``T.let``: TVMScript's let annotation (``x: T.let = expr``, ``x: T.let[T.int32] = expr``),
which is also a statement: ``T.let(x, expr)`` binds the variable ``x`` (made by ``T.int32()``)
to ``expr`` for the rest of the scope, as in the public TileLang."""

from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.script.ir_builder import tirx as _builder
from tvm.tirx.script.builder.ir import LetAnnotation

from ..errors import DSLTypeError


class Let(LetAnnotation):
    """The ``T.let`` object: an annotation when subscripted or used bare, a binding when
    called with a variable and its value."""

    def __call__(self, var: Any, value: Any) -> tirx.Var:
        if not isinstance(var, tirx.Var):
            raise DSLTypeError(f"T.let(var, value): var must be a variable made by a dtype "
                               f"(x = T.int32()), got {var!r}")
        return _builder.bind(value, var=var)


let = Let()

__all__ = ["let"]
