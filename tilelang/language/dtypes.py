"""The dtype objects of the language: ``T.float16``, ``T.int32``, ``T.bool`` ... and
``T.dtype(x)``.  Each is a :class:`tilelang.utils.dtype.dtype`: the type's name as a string,
callable like TVMScript's constructors (``T.float32(0)`` is a constant, ``T.float32(x)`` a
cast, ``n: T.int32`` a scalar parameter)."""

from __future__ import annotations

from tvm.script import tirx as _tvm_T

from typing import Any

import tvm
from tvm import tirx

from ..errors import DSLTypeError
from ..utils.dtype import _TORCH as _TORCH_OF_NAME
from ..utils.dtype import canonical_dtype, dtype

# Every element type TVMScript names (``float16``, ``float16x4``, ``f16`` ...), as dtype objects.
_NAMES = {
    name: dtype(obj._dtype_str)
    for name, obj in vars(_tvm_T).items()
    if type(obj).__name__ == "DtypeConstructor"
}
_NAMES.update(
    bool=dtype("bool"),
    float=dtype("float32"),
    int=dtype("int32"),
    uint=dtype("uint32"),
    tfloat32=dtype("tfloat32"),  # stored as float32; see docs/compatibility.md
    int1=dtype("int1"), int2=dtype("int2"), int4=dtype("int4"),
    uint1=dtype("uint1"), uint2=dtype("uint2"), uint4=dtype("uint4"),
    float4_e2m1fn=dtype("float4_e2m1fn"),
    float8_e4m3=dtype("float8_e4m3fn"),  # the same type (see utils.dtype._ALIASES)
)
globals().update(_NAMES)

# The public TileLang's table from torch dtypes to dtype names (its examples import it): each
# torch dtype under its canonical name (aliases such as float8_e4m3 and handle left out).
_TORCH_DTYPE_TO_STR = {t: n for n, t in _TORCH_OF_NAME.items()
                       if t is not None and n not in ("float8_e4m3", "handle")}


def reinterpret(value: Any, dtype: Any, span: Any = None) -> Any:
    """The bits of ``value`` read as ``dtype`` (same width): ``T.reinterpret(x, T.uint16)``,
    the public TileLang's order; TVM's order ``T.reinterpret(dtype, value)`` is accepted too.
    ``dtype`` may be a name, a dtype object or any other form ``T.dtype`` takes."""
    if _is_dtype(value) and not _is_dtype(dtype):
        value, dtype = dtype, value
    target = str(canonical_dtype(dtype, "T.reinterpret"))
    ty = getattr(value, "ty", None)
    if isinstance(ty, tvm.ir.PrimType) and "bool" in str(ty.dtype) + target:
        raise DSLTypeError(f"T.reinterpret({ty.dtype} value, {target}): a bool has no bit "
                           f"pattern to reinterpret (T.cast converts to and from bool)")
    if isinstance(ty, tvm.ir.PrimType) and "float4" not in str(ty.dtype) + target:
        have, want = (tvm.DataType(t) for t in (str(ty.dtype), target))
        if have.bits * have.lanes != want.bits * want.lanes:
            raise DSLTypeError(
                f"T.reinterpret({ty.dtype} value, {target}): the bits are kept, so the widths "
                f"must match, but {ty.dtype} has {have.bits * have.lanes} bits and {target} "
                f"{want.bits * want.lanes} (T.cast converts the value instead)")
    return tirx.reinterpret(target, value, span)


def _is_dtype(x: Any) -> bool:
    return not isinstance(x, tvm.ir.Expr) and (
        isinstance(x, (str, tvm.DataType, type)) or hasattr(x, "_dtype_str")
        or type(x).__name__ == "dtype")  # str, dtype object, TVMScript constructor, torch


__all__ = ["dtype", "reinterpret", *sorted(_NAMES)]
