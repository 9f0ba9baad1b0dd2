"""``@T.prim_func``: TVMScript's parser plus the tile language's post-processing and errors.

Errors raised while the program is parsed (a tile operator's checks, a bad dtype, TVMScript's
own complaints) come out as :class:`tilelang.errors.DSLError` whose message names the op and
shows the user's source line; a value of the wrong type gives :class:`DSLTypeError`.  After
parsing, every element access with constant indices is checked against the buffer's static
shape.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Callable

import tvm
import tvm_ffi
from tvm import tirx
from tvm.error import DiagnosticError
from tvm.script.parser.core import utils as _utils
from tvm.script.parser.core.entry import parse as _parse
from tvm.tirx import PrimFunc

from ..errors import DSLError, DSLTypeError, source_location
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
            with scalar_bindings() as bindings:
                f = _parse(fn, extra_vars, check_well_formed=check_well_formed)
            f = mark_parallel_loops(f)
        except DiagnosticError as err:
            cause = _root_cause(err)
            kind = DSLTypeError if isinstance(cause, TypeError) else DSLError
            dsl = kind(_message(err))
            dsl.cause = cause  # the op's own exception, for debugging
            raise dsl from None
        finally:
            clear_pending()
        check_bindings(f, bindings)
        check_constant_indices(f)
        setattr(f, "__name__", fn.__name__)
        return f

    if func is not None:
        return decorate(func)
    setattr(decorate, "dispatch_token", "tirx")
    return decorate


setattr(prim_func, "dispatch_token", "tirx")


@contextlib.contextmanager
def scalar_bindings():
    """While a body is parsed, record the defining value of each kernel scalar made by
    ``x = expr`` (see :class:`tilelang.ops.region.ScalarBindings`)."""
    from tvm.tirx.script.parser import parser as tvm_parser

    from ..ops import region as R

    original = tvm_parser.bind_assign_value
    bindings = R.ScalarBindings()

    def bind(self, node, var_name, value, *args, **kwargs):
        res = original(self, node, var_name, value, *args, **kwargs)
        if isinstance(res, tvm.ir.TensorLoad) and isinstance(value, tvm.ir.Expr) \
                and not res.same_as(value):  # a new scalar, defined by value
            R.record_binding(res.source, value)
        return res

    tvm_parser.bind_assign_value = bind
    R._bindings.append(bindings)
    try:
        yield bindings
    finally:
        R._bindings.pop()
        tvm_parser.bind_assign_value = original


def check_bindings(func: PrimFunc, bindings) -> None:
    """Raise :class:`DSLError` if a shape check relied on the defining value of a scalar that
    the body assigns more than once."""
    if not bindings.relied:
        return
    stores: dict = {}
    tvm_ffi.structural_walk(func.body, (tirx.BufferStore, lambda s: stores.__setitem__(
        s.buffer.__chandle__(), stores.get(s.buffer.__chandle__(), 0) + 1)))
    for key, (buf, claim) in bindings.relied.items():
        if stores.get(key, 0) > 1:
            raise DSLError(f"a tile operator's shape check needs {claim}, which holds for the "
                           f"value {buf.name} is defined with, but {buf.name} is assigned "
                           f"{stores[key]} times; compute the slice bounds from values that "
                           f"do not change")


def _message(err: DiagnosticError) -> str:
    msg = str(err).strip()
    return msg[len("error: "):] if msg.startswith("error: ") else msg


def _root_cause(err: BaseException) -> BaseException | None:
    cause = err.__cause__ or err.__context__
    while cause is not None and isinstance(cause, DiagnosticError):
        cause = cause.__cause__ or cause.__context__
    return cause


def check_constant_indices(func: PrimFunc) -> None:
    """Raise :class:`DSLError` for a load or store whose constant index lies outside the
    buffer's static extent in that dimension (``A[100]`` of a 64-element tensor)."""
    bad: list[str] = []

    def check(node):
        store = isinstance(node, tirx.BufferStore)
        buf = node.buffer if store else node.source
        idx = list(node.indices)
        if bad or len(idx) != len(buf.shape):
            return
        for d, (i, n) in enumerate(zip(idx, buf.shape)):
            if isinstance(i, tirx.IntImm) and isinstance(n, tirx.IntImm) \
                    and not 0 <= i.value < n.value:
                shape = tuple(int(x) for x in buf.shape)
                access = f"{buf.name}[{', '.join(str(x) for x in idx)}]"
                where = source_location(node.span)
                bad.append(f"{'store to' if store else 'load of'} {access}: index {i.value} is "
                           f"out of bounds for dimension {d} of {buf.name} with shape {shape} "
                           f"(valid: 0 to {n.value - 1})" + (f"\n  {where}" if where else ""))
                return

    # the callback only records: an exception raised inside the walk would cross TVM's FFI
    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, check), (tvm.ir.TensorLoad, check)])
    if bad:
        raise DSLError(bad[0])
