"""``@T.prim_func`` over a function written like an eager kernel: tensor parameters typed in
the body (``A: T.Tensor(...)`` as a statement, the signature saying only ``def kernel(A)``)
and outputs made with ``T.empty`` and returned.  The function is built once, as the eager
``@tilelang.jit`` builds it (``tilelang/jit/eager.py``); the outputs become the last
parameters and their indices (counted from the end) the ``tilelang_out_idx`` attribute, which
``tilelang.compile`` uses as ``out_idx``."""

from __future__ import annotations

import ast
import inspect
from typing import Callable

from tvm.tirx import PrimFunc

from ..errors import DSLError
from .func_attrs import OUT_IDX


def is_lazy(fn: Callable) -> bool:
    """Whether ``fn`` leaves a parameter untyped in its signature or makes ``T.empty``
    outputs: the forms only the eager builder reads."""
    from ..jit.eager import _function_ast, _is_t_call, _walk_own

    sig = inspect.signature(fn)
    if any(p.annotation is inspect.Parameter.empty for p in sig.parameters.values()):
        return True
    tree = _function_ast(fn)
    return tree is not None and any(_is_t_call(n, ("empty",)) for n in _walk_own(tree)
                                    if isinstance(n, ast.Call))


def prim_func(fn: Callable) -> PrimFunc:
    """The ``PrimFunc`` of a lazily typed ``fn`` (see the module docstring)."""
    from ..jit.eager import EagerJITFunction

    eager = EagerJITFunction(fn, {})
    untyped = [n for n in eager.value_params
               if eager.signature.parameters[n].annotation is inspect.Parameter.empty]
    if untyped:
        raise DSLError(f"T.prim_func {fn.__name__}: parameter {untyped[0]!r} has no type; "
                       f"annotate it in the signature or as the body's statement "
                       f"`{untyped[0]}: T.Tensor(shape, dtype)`")
    func, opts = eager.program()
    n = len(func.params)
    if opts["out_idx"]:
        func = func.with_attr(OUT_IDX, [i - n for i in opts["out_idx"]])
    setattr(func, "__name__", fn.__name__)
    return func


__all__ = ["is_lazy", "prim_func"]
