"""How a tilelang pass is made: a function ``PrimFunc -> PrimFunc`` wrapped as a TVM
``transform.Pass`` (runnable alone: ``LowerTileOps()(mod)``)."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import tvm
from tvm import tirx
from tvm.target import Target

from ..errors import LoweringError, TileLangError, source_location


# A TileLangError raised inside a pass crosses TVM's FFI as a plain RuntimeError; the original
# is kept here so that the driver can re-raise it with its type (see ``original_error``).
_last_error: list[BaseException] = []


def function_pass(name: str) -> Callable[[Callable], Callable[[], tvm.transform.Pass]]:
    """Decorate ``fn(func) -> func``; the result is a factory of the TVM pass."""

    def deco(fn: Callable[[tirx.PrimFunc], tirx.PrimFunc]):
        def run(f, _mod, _ctx):
            try:
                return fn(f)
            except TileLangError as err:
                _last_error[:] = [err]
                raise

        def factory() -> tvm.transform.Pass:
            return tirx.transform.prim_func_pass(run, opt_level=0, name=name)

        factory.__name__ = name.split(".")[-1]
        factory.__doc__ = fn.__doc__
        factory.run = fn  # the bare function, for tests
        return factory

    return deco


@contextlib.contextmanager
def at_source(span) -> Iterator[None]:
    """Append the user's source line of ``span`` (a tile op's) to a ``LoweringError`` raised
    inside; an error that already names a line keeps it."""
    try:
        yield
    except LoweringError as err:
        where = source_location(span)
        if where and not getattr(err, "located", False) and len(err.args) == 1:
            err.args = (f"{err.args[0]}\n  {where}",)
            err.located = True
        raise


def target_of(func: tirx.PrimFunc) -> Target:
    t = func.attrs.get("target") if func.attrs is not None else None
    if t is None:
        raise LoweringError("the function has no target attribute; run tvm.tirx.transform."
                            "BindTarget first (tilelang.lower does)")
    return t


def kernel_name(func: tirx.PrimFunc, default: str = "the kernel") -> str:
    """The function's ``global_symbol``, for messages; ``default`` when it has none."""
    if func.attrs is not None and "global_symbol" in func.attrs:
        return str(func.attrs["global_symbol"])
    return default


@contextlib.contextmanager
def original_errors():
    """Re-raise a TileLangError that a pass raised inside TVM with its own type."""
    _last_error.clear()
    try:
        yield
    except Exception as err:
        if _last_error and not isinstance(err, TileLangError):
            orig = _last_error[0]
            _last_error.clear()
            raise orig.with_traceback(None) from None
        raise
    finally:
        _last_error.clear()
