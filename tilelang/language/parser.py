"""``@T.prim_func``: TVMScript's parser plus the tile language's post-processing and errors.

Errors raised while the program is parsed (a tile operator's checks, a bad dtype, TVMScript's
own complaints) come out as :class:`tilelang.errors.DSLError` whose message names the op and
shows the user's source line.
"""

from __future__ import annotations

import inspect
from typing import Callable

from tvm.error import DiagnosticError
from tvm.script.parser.core import utils as _utils
from tvm.script.parser.core.entry import parse as _parse
from tvm.tirx import PrimFunc

from ..errors import DSLError
from .loop import clear_pending, mark_parallel_loops


def prim_func(func: Callable | None = None, private: bool = False,
              check_well_formed: bool = True):
    """Parse a Python function written in the tile language into a ``PrimFunc``."""

    def decorate(fn: Callable) -> PrimFunc:
        if not inspect.isfunction(fn):
            raise TypeError(f"T.prim_func expects a function, got {fn!r}")
        extra_vars = _utils.inspect_function_capture(fn)
        if _utils._has_string_annotations(fn):  # PEP 563: annotation names live in frames
            _utils.resolve_closure_vars(fn, extra_vars, inspect.stack())
        clear_pending()
        try:
            f = _parse(fn, extra_vars, check_well_formed=check_well_formed)
            f = mark_parallel_loops(f)
        except DiagnosticError as err:
            dsl = DSLError(_message(err))
            dsl.cause = _root_cause(err)  # the op's own exception, for debugging
            raise dsl from None
        finally:
            clear_pending()
        setattr(f, "__name__", fn.__name__)
        return f

    if func is not None:
        return decorate(func)
    setattr(decorate, "dispatch_token", "tirx")
    return decorate


setattr(prim_func, "dispatch_token", "tirx")


def _message(err: DiagnosticError) -> str:
    msg = str(err).strip()
    return msg[len("error: "):] if msg.startswith("error: ") else msg


def _root_cause(err: BaseException) -> BaseException | None:
    cause = err.__cause__ or err.__context__
    while cause is not None and isinstance(cause, DiagnosticError):
        cause = cause.__cause__ or cause.__context__
    return cause
