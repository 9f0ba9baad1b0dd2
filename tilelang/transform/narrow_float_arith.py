"""``PromoteNarrowFloatArith`` (CUDA): arithmetic on float8 (or narrower float) values is done
in float32 and rounded back once.

CUDA's ``__nv_fp8_*`` types have no arithmetic, ``min`` or ``max`` (nvcc: "no instance of
overloaded function max"), and TVM prints ``T.max(a, b)`` of two float8 values as exactly
that.  Widening is exact for these types, and so are ``min``, ``max``, ``+``, ``-`` and ``*``
of two of them in float32, so the single rounding back gives the correctly rounded result
(a quotient is rounded twice).  CPU: ``ExactFloat8Casts`` computes them the same way.

``min``/``max`` of float16 and bfloat16 values are done in float32 too (exact): CUDA's
``fminf``/``fmaxf`` ignore a NaN operand, where TVM's ``max(half, half)`` (``a > b ? a : b``)
gave the second operand; the CPU computes them the same way (``LowerCPUMath``).
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..engine.target import is_cpu
from ..ir_utils import map_nodes
from ..utils.dtype import is_narrow_float
from .passes import function_pass, target_of

_BINARY = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Min, tirx.Max)


def _narrow_float(expr) -> tvm.DataType | None:
    """The float8 (or narrower float) type of ``expr``, else ``None`` (pointers included)."""
    if not isinstance(expr.ty, tvm.ir.PrimType) or not is_narrow_float(expr.ty.dtype):
        return None
    return tvm.DataType(str(expr.ty.dtype))


def _half(expr) -> tvm.DataType | None:
    """The float16/bfloat16 type of ``expr``, else ``None``."""
    if isinstance(expr.ty, tvm.ir.PrimType) and str(expr.ty.dtype).startswith(("float16",
                                                                              "bfloat16")):
        return tvm.DataType(str(expr.ty.dtype))
    return None


def _wide(dtype: tvm.DataType) -> str:
    return "float32" if dtype.lanes == 1 else f"float32x{dtype.lanes}"


def _promote(node):
    t = _narrow_float(node)
    if t is None and isinstance(node, (tirx.Min, tirx.Max)):
        t = _half(node)
    if t is None:
        return node
    wide = _wide(t)
    a, b = tirx.Cast(wide, node.a), tirx.Cast(wide, node.b)
    return tirx.Cast(str(node.ty.dtype), type(node)(a, b))


@function_pass("tl.PromoteNarrowFloatArith")
def PromoteNarrowFloatArith(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """CUDA: ``+ - * / min max`` of float8 values, and ``min max`` of float16/bfloat16 ones,
    computed in float32, rounded back once."""
    if is_cpu(target_of(func)):
        return func
    body = map_nodes(func.body, [(t, _promote) for t in _BINARY])
    return func.with_body(body)


__all__ = ["PromoteNarrowFloatArith"]
