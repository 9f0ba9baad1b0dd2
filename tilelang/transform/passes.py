"""How a tilelang pass is made: a function ``PrimFunc -> PrimFunc`` wrapped as a TVM
``transform.Pass`` (runnable alone: ``LowerTileOps()(mod)``)."""

from __future__ import annotations

from typing import Callable

import tvm
from tvm import tirx
from tvm.target import Target

from ..errors import LoweringError


def function_pass(name: str) -> Callable[[Callable], Callable[[], tvm.transform.Pass]]:
    """Decorate ``fn(func) -> func``; the result is a factory of the TVM pass."""

    def deco(fn: Callable[[tirx.PrimFunc], tirx.PrimFunc]):
        def factory() -> tvm.transform.Pass:
            return tirx.transform.prim_func_pass(lambda f, _m, _c: fn(f), opt_level=0, name=name)

        factory.__name__ = name.split(".")[-1]
        factory.__doc__ = fn.__doc__
        factory.run = fn  # the bare function, for tests
        return factory

    return deco


def target_of(func: tirx.PrimFunc) -> Target:
    t = func.attrs.get("target") if func.attrs is not None else None
    if t is None:
        raise LoweringError("the function has no target attribute; run tvm.tirx.transform."
                            "BindTarget first (tilelang.lower does)")
    return t
