"""``LowerCPUMath`` (CPU): math intrinsics that TVM's LLVM backend cannot lower, or lowers
inexactly, computed the way a GPU does.

* A math intrinsic of float16 or bfloat16 values (``T.erf``, ``T.cosh``, ``T.atan``, ``T.fmod``,
  ...) is computed in float32 and rounded back once, as CUDA computes half-precision math.
  TVM's LLVM backend has no float16 lowering for most of them ("TVM failed an internal check").
* ``T.tanh`` calls the C library's ``tanhf`` / ``tanh``: TVM's own lowering,
  ``(1 - exp(-2x)) / (1 + exp(-2x))``, cancels near 0 (``tanh(1e-8)`` was 0, ``tanh(1e-6)``
  1.3% off), which the tanh approximation of GELU hits.
* ``T.fmod`` calls ``fmodf`` / ``fmod``, which TVM's LLVM backend does not know, and
  ``T.exp10`` ``exp10f`` / ``exp10`` (TVM's lowering was 6-10 ulp off; CUDA's is 2).
* An integer shift by the type's width or more (an amount known at run time) gives what the
  GPU's ``shl``/``shr`` give, which clamp the amount: 0, or for a right shift of a signed value
  its sign (LLVM leaves it undefined; x86 shifts by the amount modulo the width).

* A conversion of a float to an integer type gives what CUDA gives (``cvt.rzi``): toward 0,
  clamped, NaN 0 (``1 << (bits - 1)`` into 64 bits or from float64).  A float32 or float64
  value is clamped to the 32-bit integer of the target's signedness (64-bit for a 64-bit target) and the low bits kept, as nvcc compiles C's cast
  (``int8(1e10)`` is -1, ``uint8(-3.0)`` 0), and so is a float16 value converted to 8 bits
  (TVM writes ``(signed char)(int)h``); other float16, bfloat16 and float8 conversions are
  clamped to the target's range (CUDA's conversion operators).  LLVM leaves an out-of-range
  conversion undefined (x86 gave INT_MIN).

* A float ``T.min``/``T.max`` ignores a NaN operand in either order, as CUDA's ``fminf`` /
  ``fmaxf`` do (LLVM's compare-and-select gave the second operand).

A vector call is made lane by lane.  GPU targets: unchanged (CUDA's own functions).
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..engine.target import is_cpu
from ..ir_utils import map_nodes
from ..utils.dtype import int_range
from .passes import function_pass, target_of


def _ops(*names: str) -> set:
    out = set()
    for n in names:
        try:
            out.add(tvm.ir.Op.get(f"tirx.{n}"))
        except Exception:  # noqa: BLE001 - an intrinsic this TVM build does not register
            pass
    return out


# float -> float intrinsics whose every argument has the result's type
_MATH = _ops("exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin",
             "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh",
             "atanh", "erf", "sigmoid", "pow", "fmod", "atan2", "hypot", "copysign",
             "nextafter")
# intrinsics computed by the C library: op -> (float32 name, float64 name)
_LIBM = {tvm.ir.Op.get(f"tirx.{name}"): (f"{name}f", name) for name in ("tanh", "fmod", "exp10")}
_HALF = ("float16", "bfloat16")


def _same_type_math(call) -> str | None:
    """The element type of a math intrinsic ``call`` whose arguments all have its type."""
    if not isinstance(call.op, tvm.ir.Op) or call.op not in _MATH or \
            not isinstance(call.ty, tvm.ir.PrimType):
        return None
    dtype = str(call.ty.dtype)
    if any(str(a.ty.dtype) != dtype for a in call.args if isinstance(a.ty, tvm.ir.PrimType)):
        return None
    return dtype


def _lanes_of(x, lanes: int) -> list:
    """The ``lanes`` scalar lanes of vector expression ``x``."""
    return [tirx.Shuffle([x], [tirx.const(k, "int32")]) for k in range(lanes)]


def _libm(call, elem: str, lanes: int):
    """``call`` (float32 or float64) as calls of the C library function, lane by lane."""
    name = _LIBM[call.op][0 if elem == "float32" else 1]
    if lanes == 1:
        return tirx.call_pure_extern(elem, name, *call.args)
    per_lane = [_lanes_of(a, lanes) for a in call.args]
    calls = [tirx.call_pure_extern(elem, name, *[args[k] for args in per_lane])
             for k in range(lanes)]
    return tirx.Shuffle(calls, [tirx.const(k, "int32") for k in range(lanes)])


def _lower(call):
    dtype = _same_type_math(call)
    if dtype is None:
        return call
    elem, _, lanes = dtype.partition("x")
    lanes = int(lanes or 1)
    if elem in _HALF:
        wide = "float32" if lanes == 1 else f"float32x{lanes}"
        inner = tvm.ir.Call(call.op, [tirx.Cast(wide, a) for a in call.args], ret_ty=wide)
        return tirx.Cast(dtype, _lower(inner))
    if call.op in _LIBM and elem in ("float32", "float64"):
        return _libm(call, elem, lanes)
    return call


def nan_ignoring(node):
    """A float ``Min``/``Max`` as ``llvm.minnum``/``maxnum``: a NaN operand gives the other
    one, in either order (CUDA's ``fminf``/``fmaxf``, ``__hmin``/``__hmax``); LLVM's
    compare-and-select gave the second operand.  float16 and bfloat16 in float32 (exact);
    float8 is left to ``ExactFloat8Casts``, which calls this on its float32 values."""
    ty = str(node.ty.dtype)
    elem, _, lanes = ty.partition("x")
    if not elem.startswith(("float", "bfloat")) or elem.startswith("float8"):
        return node
    name = "llvm.maxnum" if isinstance(node, tirx.Max) else "llvm.minnum"
    if elem in _HALF:
        wide = "float32" + (f"x{lanes}" if lanes else "")
        return tirx.Cast(ty, tirx.call_llvm_pure_intrin(
            wide, name, tirx.Cast(wide, node.a), tirx.Cast(wide, node.b)))
    return tirx.call_llvm_pure_intrin(ty, name, node.a, node.b)


def _shift(node):
    """A scalar integer shift whose amount may reach the width, clamped as on the GPU."""
    ty = str(node.ty.dtype)
    if not ty.startswith(("int", "uint")) or "x" in ty:
        return node
    bits = tvm.DataType(ty).bits
    n = node.b
    if isinstance(n, tirx.IntImm) and 0 <= n.value < bits:
        return node
    amount_ty = str(n.ty.dtype)
    wide = tirx.Cast(f"uint{max(tvm.DataType(amount_ty).bits, 8)}", n) >= bits  # negative: huge
    if isinstance(node, tirx.LShift) or ty.startswith("uint"):
        overflow = tirx.const(0, ty)
    else:
        overflow = tirx.RShift(node.a, tirx.const(bits - 1, ty))  # the sign
    return tirx.Select(wide, overflow, node)


def _clamp_type(src: str, dst: str) -> str:
    """The integer type the GPU clamps a ``src`` float to before keeping the low bits of
    integer type ``dst`` (module doc)."""
    bits = tvm.DataType(dst).bits
    if bits < 64 and (src.startswith(("float32", "float64")) or
                      (src.startswith("float16") and bits == 8)):
        bits = 32
    return f"{'u' if dst.startswith('uint') else ''}int{bits}"


def _nan_integer(src: str, wide: str) -> int:
    """What the GPU's conversion of a ``src`` NaN to the integer type ``wide`` gives: only the
    bit pattern ``1 << (bits - 1)`` from float64 or into 64 bits, else 0 (measured on sm_90)."""
    bits = tvm.DataType(wide).bits
    if bits < 64 and not src.startswith("float64"):
        return 0
    return -(1 << (bits - 1)) if not wide.startswith("uint") else 1 << (bits - 1)


def gpu_float_to_int(value: float, src: str, dst: str) -> int:
    """The integer of type ``dst`` that the GPU makes of the ``src`` value ``value`` (the rule
    of the module doc; ``value`` is already a value of ``src``)."""
    low, high = int_range(_clamp_type(src, dst))
    if value != value:  # NaN
        n = _nan_integer(src, _clamp_type(src, dst))
        dst_low, dst_high = int_range(dst)
        return (n - dst_low) % (dst_high - dst_low + 1) + dst_low
    n = high if value >= high + 1 else low if value <= low - 1 else int(value)
    dst_low, dst_high = int_range(dst)
    return (n - dst_low) % (dst_high - dst_low + 1) + dst_low  # the low bits


def _float_to_int(cast):
    """A float -> integer conversion clamped as the GPU's ``cvt.rzi`` clamps it (module doc)."""
    ty, src = str(cast.ty.dtype), str(cast.value.ty.dtype)
    if not ty.startswith(("int", "uint")) or not src.startswith(("float", "bfloat")):
        return cast
    elem, _, lanes = ty.partition("x")
    lanes = int(lanes or 1)
    x = cast.value
    if not src.startswith(("float32", "float64")):  # narrow floats: exact in float32
        x = tirx.Cast("float32" if lanes == 1 else f"float32x{lanes}", x)
    wide_ty = _clamp_type(src, elem)
    fty = str(x.ty.dtype).partition("x")[0]

    def const(v, t):
        c = tirx.const(v, t)
        return c if lanes == 1 else tirx.Broadcast(c, lanes)

    small, big = int_range(wide_ty)
    v_ty = wide_ty if lanes == 1 else f"{wide_ty}x{lanes}"
    if tvm.DataType(wide_ty).bits < 64:
        # clamped in float to +-2**62, converted to int64 (exact), clamped there: ``x`` is read
        # twice, so nested conversions grow twofold per level
        i64 = "int64" if lanes == 1 else f"int64x{lanes}"
        c = tirx.Cast(i64, tirx.Max(tirx.Min(x, const(2.0 ** 62, fty)), const(-2.0 ** 62, fty)))
        out = tirx.Cast(v_ty, tirx.Max(tirx.Min(c, const(big, "int64")),
                                       const(small, "int64")))
    else:
        # the result toward 0 is above the maximum from x >= max + 1, below the minimum from
        # x <= min - 1
        out = tirx.Select(x >= const(float(big + 1), fty), const(big, wide_ty),
                          tirx.Select(x <= const(float(small - 1), fty), const(small, wide_ty),
                                      tirx.Cast(v_ty, x)))
    out = tirx.Select(tirx.isnan(x), const(_nan_integer(src, wide_ty), wide_ty), out)
    return out if v_ty == ty else tirx.Cast(ty, out)


@function_pass("tl.LowerCPUMath")
def LowerCPUMath(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """CPU: half-precision math in float32; ``tanh``, ``fmod`` and ``exp10`` from the C
    library; wide integer shifts and float -> integer conversions clamped, float min/max
    NaN-ignoring, as on the GPU."""
    if not is_cpu(target_of(func)):
        return func
    body = map_nodes(func.body, [(tvm.ir.Call, _lower), (tirx.LShift, _shift),
                                 (tirx.RShift, _shift), (tirx.Cast, _float_to_int),
                                 (tirx.Min, nan_ignoring), (tirx.Max, nan_ignoring)])
    return func if body.same_as(func.body) else func.with_body(body)


__all__ = ["LowerCPUMath"]
