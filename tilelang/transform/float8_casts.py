"""``ExactFloat8Casts`` (CPU): conversions to and from float8 (``float8_e4m3fn``,
``float8_e5m2``) written out as integer arithmetic on their bits, with the GPU's semantics.

TVM's LLVM lowering of these casts gives wrong values on the CPU backend: 0 decodes as
0.0078125, 500 encodes as -0.0, infinity as 1.0, NaN as 1.5.  Here decoding is exact
(subnormals, and for e5m2 infinities and NaNs, included), and encoding rounds to nearest even,
saturates finite overflow and infinities to the largest finite value (as CUDA's
``__nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...)`` does) and keeps NaN a NaN.  Wider sources
(float16, bfloat16, float64) go through float32 first.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..engine.target import is_cpu
from ..ir_utils import map_nodes
from .passes import function_pass, target_of

# exponent bits, mantissa bits, bias, largest finite code, NaN code, whether e==max is inf/NaN
_FORMATS = {
    "float8_e4m3fn": (4, 3, 7, 0x7E, 0x7F, False),
    "float8_e5m2": (5, 2, 15, 0x7B, 0x7E, True),
}


def _scalar_name(dtype: str) -> str:
    t = tvm.DataType(dtype)
    return str(t.with_lanes(1)) if t.lanes > 1 else dtype


def _lanes(dtype) -> int:
    return tvm.DataType(str(dtype)).lanes


def _vec(scalar: str, lanes: int) -> str:
    return scalar if lanes == 1 else f"{scalar}x{lanes}"


def _c(value, scalar: str, lanes: int):
    v = tirx.const(value, scalar)
    return v if lanes == 1 else tirx.Broadcast(v, lanes)


def _decode(x, fmt, lanes: int):
    """float32 value of the float8 expression ``x``."""
    e_bits, m_bits, bias, _max, _nan, has_inf = fmt
    u32, f32 = _vec("uint32", lanes), _vec("float32", lanes)
    b = tirx.Cast(u32, tirx.reinterpret(_vec("uint8", lanes), x))
    c = lambda v: _c(v, "uint32", lanes)  # noqa: E731
    sign = tirx.bitwise_and(b, c(0x80))
    e = tirx.bitwise_and(tirx.shift_right(b, c(m_bits)), c((1 << e_bits) - 1))
    m = tirx.bitwise_and(b, c((1 << m_bits) - 1))
    normal_bits = tirx.bitwise_or(
        tirx.shift_left(e + c(127 - bias), c(23)), tirx.shift_left(m, c(23 - m_bits)))
    normal = tirx.reinterpret(f32, normal_bits)
    sub = tirx.Cast(f32, m) * _c(2.0 ** (1 - bias - m_bits), "float32", lanes)
    mag = tirx.Select(e == c(0), sub, normal)
    e_max = c((1 << e_bits) - 1)
    if has_inf:
        special = tirx.Select(m == c(0), _c(float("inf"), "float32", lanes),
                              _c(float("nan"), "float32", lanes))
        mag = tirx.Select(e == e_max, special, mag)
    else:  # e4m3fn: only all-ones is NaN
        mag = tirx.Select(tirx.And(e == e_max, m == c((1 << m_bits) - 1)),
                          _c(float("nan"), "float32", lanes), mag)
    return tirx.Select(sign != c(0), -mag, mag)


def _rne_shift(v, s, c):
    """``v >> s`` rounded to nearest even (``s`` >= 1)."""
    half = tirx.shift_left(c(1), s - c(1)) - c(1)
    odd = tirx.bitwise_and(tirx.shift_right(v, s), c(1))
    return tirx.shift_right(v + half + odd, s)


def _encode(x, dst: str, fmt, lanes: int):
    """The float8 ``dst`` value nearest ``x`` (float32), saturating, NaN kept."""
    _e_bits, m_bits, bias, max_code, nan_code, _has_inf = fmt
    u32 = _vec("uint32", lanes)
    c = lambda v: _c(v, "uint32", lanes)  # noqa: E731
    bits = tirx.reinterpret(u32, x)
    sign = tirx.shift_right(tirx.bitwise_and(bits, c(0x80000000)), c(24))
    mag = tirx.bitwise_and(bits, c(0x7FFFFFFF))
    e32 = tirx.shift_right(mag, c(23))
    min_normal_e32 = 127 + 1 - bias  # float32 exponent field of the smallest normal float8
    normal = _rne_shift(mag, c(23 - m_bits), c) - c((127 - bias) << m_bits)
    sig = tirx.bitwise_or(tirx.bitwise_and(mag, c(0x7FFFFF)), c(0x800000))
    # subnormal float8 (and zero): the significand shifted by 23 - m_bits + (min - e32)
    shift = c(23 - m_bits + min_normal_e32) - e32
    sub = tirx.Select(shift > c(31), c(0), _rne_shift(sig, tirx.Min(shift, c(31)), c))
    sub = tirx.Select(e32 == c(0), c(0), sub)  # float32 zeros and subnormals
    code = tirx.Select(e32 >= c(min_normal_e32), normal, sub)
    code = tirx.Min(code, c(max_code))  # finite overflow and infinity saturate
    code = tirx.Select(mag > c(0x7F800000), c(nan_code), code)
    code = tirx.bitwise_or(code, sign)
    return tirx.reinterpret(dst, tirx.Cast(_vec("uint8", lanes), code))


def _rewrite(cast):
    if not isinstance(cast.value.ty, tvm.ir.PrimType):  # a pointer cast
        return cast
    dst, src = str(cast.ty.dtype), str(cast.value.ty.dtype)
    lanes = _lanes(dst)
    to8, from8 = _FORMATS.get(_scalar_name(dst)), _FORMATS.get(_scalar_name(src))
    if from8 is not None and to8 is None:
        val = _decode(cast.value, from8, lanes)
        return val if _scalar_name(dst) == "float32" else tirx.Cast(dst, val)
    if to8 is not None and from8 is None:
        val = cast.value
        if _scalar_name(src) != "float32":
            val = tirx.Cast(_vec("float32", lanes), val)
        return _encode(val, dst, to8, lanes)
    if to8 is not None and from8 is not None and _scalar_name(dst) != _scalar_name(src):
        return _encode(_decode(cast.value, from8, lanes), dst, to8, lanes)
    return cast


@function_pass("tl.ExactFloat8Casts")
def ExactFloat8Casts(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """CPU: casts to and from float8 as exact integer arithmetic on the bits."""
    if not is_cpu(target_of(func)):
        return func
    return func.with_body(map_nodes(func.body, [(tirx.Cast, _rewrite)]))


__all__ = ["ExactFloat8Casts"]
