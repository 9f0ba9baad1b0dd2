"""Checks of the integer extents a program writes: grid sizes, thread counts, tile shapes.

An extent is a positive Python integer or an integer ``PrimExpr`` (a symbolic size); a
constant one must be at least 1.  A value of another type raises :class:`DSLTypeError`, a
constant below 1 :class:`DSLError`; both name the op, and the parser adds the source line.
"""

from __future__ import annotations

import numbers
from typing import Any

import tvm
from tvm import tirx

from ..errors import DSLError, DSLTypeError


def positive_extent(value: Any, op: str, what: str) -> Any:
    """``value`` as an extent (an ``int`` or an integer ``PrimExpr``), checked for ``op``'s
    ``what`` (e.g. ``"T.Kernel", "grid dimension 0"``)."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral)
                                       or tvm.ir.is_prim_expr(value)):
        raise DSLTypeError(f"{op}: {what} must be an integer, got {value!r} "
                           f"({type(value).__name__})")
    if isinstance(value, numbers.Integral):
        value = int(value)
    else:
        dtype = tvm.DataType(str(value.ty))
        if dtype.type_code not in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT) or dtype.lanes != 1:
            raise DSLTypeError(f"{op}: {what} must be an integer, got {value} of type {dtype}")
    n = value if isinstance(value, int) else value.value if isinstance(value, tirx.IntImm) else None
    if n is not None and n < 1:
        raise DSLError(f"{op}: {what} must be positive, got {n}")
    return value
