"""``ExactFloat8Casts`` (CPU): float8 (``float8_e4m3fn``, ``float8_e5m2``) values computed
exactly, with the GPU's semantics: float8 buffers hold their bits, float8 values are float32.

TVM's LLVM lowering of float8 gives wrong values on the CPU backend: 0 decodes as 0.0078125,
500 encodes as -0.0, infinity as 1.0, NaN as 1.5; and its ``FP8ComputeLegalize`` keeps
kernel-local float8 buffers (a shared tile staging a float8 GEMM's operands) in float32 through
those conversions.  Here every kernel-local float8 buffer becomes a ``uint8`` buffer of its bits,
and every float8 tensor parameter is read and written as bits; a float8 value is computed in
float32: decoding is exact (subnormals, and for e5m2 infinities and NaNs, included), and
encoding rounds to nearest even, saturates finite overflow and infinities to the largest finite
value (as CUDA's ``__nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...)`` does) and keeps NaN a NaN.
A float8 value moved from one float8 buffer to another keeps its bits; ``+ - * / min max`` of
float8 values (and a conversion between the two formats) are rounded back to float8 once, as
``PromoteNarrowFloatArith`` has CUDA do.  float16 and bfloat16 sources go through float32
(exact); a float64 source is rounded from its own bits, once.  ``T.reinterpret`` of a float8
value as ``uint8``, ``int8`` or the other float8 format is its bits.  A kernel with a float8
value of any other form (a call on float8 values, a pointer to a float8 element) is a
``LoweringError`` (TVM's lowering would give wrong values).  A ``T.view`` / ``T.reshape`` of
or as a float8 tile is declared over the twins.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from ..engine.target import is_cpu
from ..errors import LoweringError
from ..ir_utils import map_nodes
from .cpu_math import nan_ignoring
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


def _once(x, name: str, build):
    """``build(v)`` with ``v`` standing for ``x`` evaluated once (a ``Let`` unless ``x`` is a
    variable or a constant): the bit arithmetic reads its input several times, and nested
    conversions would otherwise grow exponentially."""
    if isinstance(x, (tirx.Var, tirx.IntImm, tirx.FloatImm)) or _has_bfloat16(x):
        return build(x)  # TVM's bfloat16 legalizer skips a Let's value (LLVM then crashed)
    v = tirx.Var(name, str(x.ty.dtype))
    return tirx.Let(v, x, build(v))


def _has_bfloat16(x) -> bool:
    found = []

    def on_expr(e):
        if isinstance(e.ty, tvm.ir.PrimType) and str(e.ty.dtype).startswith("bfloat16"):
            found.append(e)

    tvm_ffi.structural_walk(x, (tvm.ir.Expr, on_expr))
    return bool(found)


def _decode(b8, fmt, lanes: int):
    """float32 value of the float8 bits ``b8`` (``uint8``, ``lanes`` of them)."""
    return _once(b8, "f8_bits", lambda v: _decode_var(v, fmt, lanes))


def _decode_var(b8, fmt, lanes: int):
    e_bits, m_bits, bias, _max, _nan, has_inf = fmt
    u32, f32 = _vec("uint32", lanes), _vec("float32", lanes)
    b = tirx.Cast(u32, b8)
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


def _encode(x, fmt, lanes: int):
    """The bits (``uint8``) of the float8 value nearest ``x`` (float32 or float64), saturating,
    NaN kept."""
    return _once(x, "f8_value", lambda v: _encode_var(v, fmt, lanes))


def _encode_var(x, fmt, lanes: int):
    _e_bits, m_bits, bias, max_code, nan_code, _has_inf = fmt
    width = 64 if _scalar_name(str(x.ty.dtype)) == "float64" else 32
    src_m, src_bias = (52, 1023) if width == 64 else (23, 127)  # the source's fields
    uint = _vec(f"uint{width}", lanes)
    c = lambda v: _c(v, f"uint{width}", lanes)  # noqa: E731
    bits = tirx.reinterpret(uint, x)
    sign = tirx.shift_right(tirx.bitwise_and(bits, c(1 << (width - 1))), c(width - 8))
    mag = tirx.bitwise_and(bits, c((1 << (width - 1)) - 1))
    e_src = tirx.shift_right(mag, c(src_m))
    min_normal_e = src_bias + 1 - bias  # the source's exponent field of the smallest normal
    normal = _rne_shift(mag, c(src_m - m_bits), c) - c((src_bias - bias) << m_bits)
    sig = tirx.bitwise_or(tirx.bitwise_and(mag, c((1 << src_m) - 1)), c(1 << src_m))
    # subnormal float8 (and zero): the significand shifted by src_m - m_bits + (min - e_src)
    shift = c(src_m - m_bits + min_normal_e) - e_src
    sub = tirx.Select(shift > c(width - 1), c(0),
                      _rne_shift(sig, tirx.Min(shift, c(width - 1)), c))
    sub = tirx.Select(e_src == c(0), c(0), sub)  # the source's zeros and subnormals
    code = tirx.Select(e_src >= c(min_normal_e), normal, sub)
    code = tirx.Min(code, c(max_code))  # finite overflow and infinity saturate
    infinity = ((1 << (width - 1 - src_m)) - 1) << src_m
    code = tirx.Select(mag > c(infinity), c(nan_code), code)
    code = tirx.bitwise_or(code, sign)
    return tirx.Cast(_vec("uint8", lanes), code)


def _host_float8(c: tirx.FloatImm) -> np.ndarray:
    """The float8 constant ``c`` as a numpy scalar of its type (``ml_dtypes``)."""
    import ml_dtypes

    return np.array(c.value, dtype=getattr(ml_dtypes, str(c.ty.dtype)))


def _format(e) -> tuple | None:
    """The float8 format of expression ``e``'s type, else ``None`` (pointers included)."""
    if not isinstance(getattr(e, "ty", None), tvm.ir.PrimType):
        return None
    return _FORMATS.get(_scalar_name(str(e.ty.dtype)))


_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Min, tirx.Max)
_COMPARE = (tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE)
_REINTERPRET = tvm.ir.Op.get("tirx.reinterpret")
_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")


def _byte_reinterpret(e, lanes: int):
    """The bits (``uint8``) of ``T.reinterpret(float8, x)`` with ``x`` of 8-bit integers, else
    ``None``."""
    if not (isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and
            e.op.same_as(_REINTERPRET)):
        return None
    x = e.args[0]
    ty = str(x.ty.dtype) if isinstance(x.ty, tvm.ir.PrimType) else ""
    if ty == _vec("uint8", lanes):
        return x
    return tirx.reinterpret(_vec("uint8", lanes), x) if ty == _vec("int8", lanes) else None


class _Unsupported(Exception):
    """A float8 value this pass does not compute (a ``LoweringError``)."""


class _Float8:
    """The rewrite of one function (module doc)."""

    def __init__(self, func: tirx.PrimFunc):
        self.params = {b.__chandle__() for b in func.buffer_map.values()}
        self.twins: dict = {}  # kernel-local float8 buffer -> its uint8 twin
        self.kept: set = set()  # the float8 nodes left on purpose (a parameter's bits)

    def twin(self, buf):
        key = buf.__chandle__()
        if key not in self.twins:
            self.twins[key] = tirx.decl_buffer(list(buf.shape), "uint8", buf.name,
                                               scope=buf.scope())
        return self.twins[key]

    def local(self, buf) -> bool:
        return buf.__chandle__() not in self.params and \
            _FORMATS.get(_scalar_name(str(buf.dtype))) is not None

    # float8 expression -> bits / float32 --------------------------------------------------
    def bits(self, e, fmt):
        """The bits (``uint8``) of float8 expression ``e`` as format ``fmt``: a load of the
        same format keeps its bits, anything else is encoded from float32."""
        lanes = _lanes(str(e.ty.dtype))
        if isinstance(e, tvm.ir.TensorLoad) and _format(e) == fmt:
            if self.local(e.source):
                return tirx.BufferLoad(self.twin(e.source), list(e.indices))
            if e.source.__chandle__() in self.params:
                self.kept.add(e.__chandle__())
                return tirx.reinterpret(_vec("uint8", lanes), e)
            raise _Unsupported(str(e))
        given = _byte_reinterpret(e, lanes)
        if given is not None:
            return given  # bits given as float8 (T.infinity): kept
        if isinstance(e, tirx.FloatImm):  # a float8 constant: its own bits
            return tirx.const(int(_host_float8(e).view(np.uint8)), "uint8")
        return _encode(self.f32(e, rounded=False), fmt, lanes)

    def f32(self, e, rounded: bool = True):
        """The float32 value (same lanes) of float8 expression ``e``; with ``rounded=False``
        the last rounding to float8 is left out (for an encoding that rounds anyway)."""
        fmt = _format(e)
        lanes = _lanes(str(e.ty.dtype))
        f32 = _vec("float32", lanes)
        if isinstance(e, tvm.ir.TensorLoad):
            return _decode(self.bits(e, fmt), fmt, lanes)
        if isinstance(e, tirx.Cast):
            src = e.value
            if _format(src) is not None:  # the other float8 format
                return self.rounded(self.f32(src), fmt, lanes, rounded)
            if not isinstance(src.ty, tvm.ir.PrimType):
                raise _Unsupported(str(e))
            if _scalar_name(str(src.ty.dtype)) == "float64":  # rounded once, from float64
                return _decode(_encode(src, fmt, lanes), fmt, lanes)
            wide = src if str(src.ty.dtype) == f32 else tirx.Cast(f32, src)
            return self.rounded(wide, fmt, lanes, rounded)
        if isinstance(e, _ARITH):
            x = type(e)(self.f32(e.a), self.f32(e.b))
            return self.rounded(nan_ignoring(x) if isinstance(e, (tirx.Min, tirx.Max)) else x,
                                fmt, lanes, rounded)
        if isinstance(e, tirx.Select):
            return tirx.Select(e.condition, self.f32(e.true_value), self.f32(e.false_value))
        if isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and \
                e.op.same_as(_IF_THEN_ELSE):
            return tirx.if_then_else(e.args[0], self.f32(e.args[1]), self.f32(e.args[2]))
        given = _byte_reinterpret(e, lanes)
        if given is not None:
            return _decode(given, fmt, lanes)
        if isinstance(e, tirx.Broadcast):
            return tirx.Broadcast(self.f32(e.value), e.lanes)
        if isinstance(e, tirx.FloatImm):
            return tirx.const(float(_host_float8(e).astype(np.float32)), "float32")
        raise _Unsupported(str(e))

    def rounded(self, x, fmt, lanes: int, really: bool = True):
        """``x`` (float32) rounded to the nearest float8 of ``fmt``, as float32 (``x`` itself
        unless ``really``)."""
        return _decode(_encode(x, fmt, lanes), fmt, lanes) if really else x

    # callbacks (children first) ------------------------------------------------------------
    def on_cast(self, c):
        """A float8 value converted to another type: computed from its float32 value."""
        if _format(c) is not None or _format(c.value) is None:
            return c
        v = self.f32(c.value)
        return v if str(c.ty.dtype) == str(v.ty.dtype) else tirx.Cast(c.ty, v)

    def on_compare(self, e):
        if _format(e.a) is None:
            return e
        return type(e)(self.f32(e.a), self.f32(e.b))

    def on_call(self, c):
        """``T.reinterpret(t, float8 value)``: its bits, as ``uint8``, ``int8`` or the other
        float8 format."""
        if not (isinstance(c.op, tvm.ir.Op) and c.op.same_as(_REINTERPRET)) or \
                _format(c.args[0]) is None or c.args[0].__chandle__() in self.kept:
            return c
        lanes = _lanes(str(c.ty.dtype))
        bits = self.bits(c.args[0], _format(c.args[0]))
        target = str(c.ty.dtype)
        if target == _vec("uint8", lanes):
            return bits
        if target == _vec("int8", lanes) or _format(c) is not None:
            return tirx.reinterpret(target, bits)  # a float8 one: decoded where it is used
        raise _Unsupported(str(c))

    def on_store(self, s):
        fmt = _FORMATS.get(_scalar_name(str(s.buffer.dtype)))
        if fmt is None:
            return s
        bits = self.bits(s.value, fmt)
        if self.local(s.buffer):
            return tirx.BufferStore(self.twin(s.buffer), bits, list(s.indices), span=s.span)
        value = tirx.reinterpret(str(s.value.ty.dtype), bits)
        self.kept.add(value.__chandle__())
        return tirx.BufferStore(s.buffer, value, list(s.indices), span=s.span)

    def on_decl(self, d):
        """A view (``T.view``, ``T.reshape``) of or as a kernel-local float8 tile: declared
        over the twins."""
        from ..language.view import viewed_buffer

        base = viewed_buffer(d)
        if base is None:
            if self.local(d.buffer):
                raise _Unsupported(str(d.buffer))
            return d
        if not (self.local(d.buffer) or self.local(base)):
            return d
        data = tvm.ir.Call(d.data.op, [self.twin(base) if self.local(base) else base],
                           ret_ty=d.data.ty)
        return tirx.DeclBuffer(self.twin(d.buffer) if self.local(d.buffer) else d.buffer,
                               data=data)

    def on_alloc(self, a):
        if not self.local(a.buffer):
            return a
        return tirx.AllocBuffer(self.twin(a.buffer), a.annotations)


@function_pass("tl.ExactFloat8Casts")
def ExactFloat8Casts(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """CPU: float8 buffers as bits and float8 values as float32, exactly (module doc)."""
    if not is_cpu(target_of(func)) or not _float8_nodes(func.body):
        return func
    rw = _Float8(func)
    try:
        body = map_nodes(func.body, [(tirx.Cast, rw.on_cast), (tvm.ir.Call, rw.on_call),
                                     (tirx.BufferStore, rw.on_store),
                                     (tirx.AllocBuffer, rw.on_alloc),
                                     (tirx.DeclBuffer, rw.on_decl)] +
                         [(t, rw.on_compare) for t in _COMPARE])
    except _Unsupported as e:
        raise LoweringError(f"float8 on the CPU: {e} has no exact lowering here (TVM's decodes "
                            "0 as 0.0078125); convert float8 values with T.cast(x, \"float32\") "
                            "before other operations") from None
    # all or nothing: a float8 value left over would make FP8ComputeLegalize rewrite the
    # parameters' bits under our casts too
    if _float8_nodes(body) != len(rw.kept) or _float8_buffers(body, rw):
        raise LoweringError("float8 on the CPU: a float8 value of a form this backend cannot "
                            "compute exactly; convert float8 values with T.cast(x, \"float32\") "
                            "before other operations")
    return func.with_body(body)


def _float8_nodes(body) -> int:
    """How many distinct expression objects of ``body`` have a float8 type."""
    found = set()

    def on_expr(e):
        ty = getattr(e, "ty", None)
        if isinstance(ty, tvm.ir.PrimType) and _scalar_name(str(ty.dtype)) in _FORMATS:
            found.add(e.__chandle__())

    tvm_ffi.structural_walk(body, [(tvm.ir.Expr, on_expr)])
    return len(found)


def _float8_buffers(body, rw: _Float8) -> bool:
    """Whether ``body`` still allocates or declares a kernel-local float8 buffer."""
    left = []

    def on_alloc(a):
        if rw.local(a.buffer):
            left.append(a)

    tvm_ffi.structural_walk(body, [(tirx.AllocBuffer, on_alloc)])
    return bool(left)


__all__ = ["ExactFloat8Casts"]
