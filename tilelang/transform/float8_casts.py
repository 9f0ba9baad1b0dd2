"""``ExactFloat8Casts`` (CPU): conversions to and from float8 (``float8_e4m3fn``,
``float8_e5m2``) written out as integer arithmetic on their bits, with the GPU's semantics.

TVM's LLVM lowering of these casts gives wrong values on the CPU backend: 0 decodes as
0.0078125, 500 encodes as -0.0, infinity as 1.0, NaN as 1.5.  Here decoding is exact
(subnormals, and for e5m2 infinities and NaNs, included), and encoding rounds to nearest even,
saturates finite overflow and infinities to the largest finite value (as CUDA's
``__nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...)`` does) and keeps NaN a NaN.  Wider sources
(float16, bfloat16, float64) go through float32 first.  The casts rewritten are the loads of
global float8 tensors converted to a wider type and the stores of a converted value into them
(where float8 values cross the kernel's boundary): TVM's own ``FP8ComputeLegalize`` moves
kernel-local float8 buffers to float32, so a bit-level rewrite of those would not survive it;
a kernel with any other float8 value is left to TVM whole (its casts keep TVM's values).
"""

from __future__ import annotations

import tvm
import tvm_ffi
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


def _global_float8(node) -> tuple | None:
    """The float8 format of a load from a global buffer, else ``None``."""
    if not isinstance(node, tvm.ir.TensorLoad) or node.source.scope() != "global":
        return None
    return _FORMATS.get(_scalar_name(str(node.source.dtype)))


def _rewrite_load(cast):
    """``cast(load of a global float8 tensor)`` to a wider type: decoded exactly."""
    if not isinstance(cast.value.ty, tvm.ir.PrimType):  # a pointer cast
        return cast
    fmt = _global_float8(cast.value)
    dst = str(cast.ty.dtype)
    if fmt is None or _FORMATS.get(_scalar_name(dst)) is not None:
        return cast
    val = _decode(cast.value, fmt, _lanes(dst))
    return val if _scalar_name(dst) == "float32" else tirx.Cast(dst, val)


def _rewrite_store(store):
    """A store of ``cast(v)`` into a global float8 tensor: encoded exactly."""
    buf, value = store.buffer, store.value
    fmt = _FORMATS.get(_scalar_name(str(buf.dtype)))
    if fmt is None or buf.scope() != "global" or not isinstance(value, tirx.Cast) or \
            not isinstance(value.value.ty, tvm.ir.PrimType):
        return store
    src = str(value.value.ty.dtype)
    if _FORMATS.get(_scalar_name(src)) is not None:
        return store
    lanes = _lanes(str(value.ty.dtype))
    val = value.value
    if _scalar_name(src) != "float32":
        val = tirx.Cast(_vec("float32", lanes), val)
    encoded = _encode(val, str(value.ty.dtype), fmt, lanes)
    return tirx.BufferStore(buf, encoded, store.indices, span=store.span)


@function_pass("tl.ExactFloat8Casts")
def ExactFloat8Casts(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """CPU: casts between global float8 tensors and wider types as exact integer arithmetic
    on the bits."""
    if not is_cpu(target_of(func)):
        return func
    done = []  # each rewrite keeps one float8 expression: the load decoded, the value encoded

    def counted(rewrite):
        def run(node):
            out = rewrite(node)
            if out is not node:
                done.append(out)
            return out
        return run

    body = map_nodes(func.body, [(tirx.Cast, counted(_rewrite_load)),
                                 (tirx.BufferStore, counted(_rewrite_store))])
    # all or nothing: a float8 value left for TVM (kernel-local float8 buffers, arithmetic on
    # float8) makes FP8ComputeLegalize rewrite the loads under our bit casts too
    if _float8_nodes(body) != len(done):
        return func
    return func.with_body(body)


def _float8_nodes(body) -> int:
    """How many distinct expression objects of ``body`` have a float8 type (a decoded load is
    referenced several times by its bit arithmetic)."""
    found = set()

    def on_expr(e):
        ty = getattr(e, "ty", None)
        if isinstance(ty, tvm.ir.PrimType) and _scalar_name(str(ty.dtype)) in _FORMATS:
            found.add(e.__chandle__())

    tvm_ffi.structural_walk(body, [(tvm.ir.Expr, on_expr)])
    return len(found)


__all__ = ["ExactFloat8Casts"]
