"""Paired element conversions (CUDA): ``tl.device.convert_pair(address_of(dst[i]), src)``
converts the two lanes of ``src`` to ``dst``'s element type and stores them in ``dst[i]`` and
``dst[i + 1]``, with one paired instruction (``cvt.rn.f16x2.f32``,
``cvt.rn.satfinite.e4m3x2.f32``, ...) where the scalar cast takes one per lane.

The conversion is chosen from the types alone (:data:`PAIR_CONVERSIONS`); each rounds and
saturates like the scalar cast of the same types in generated code (to nearest even; float8
results saturate to the largest finite value, +-inf included, NaN stays NaN; e8m0 rounds up),
so vectorizing a cast never changes its values.  The header side is
``src/tl_templates/cuda/cast.h`` (``tl::cvt_pair`` and the ``__tl_cvt_*`` helpers).
"""

from __future__ import annotations

import tvm
from tvm import tirx

from .effects import Access, Effect, Memory, call, register_device_op

_E4M3, _E5M2 = "float8_e4m3fn", "float8_e5m2"
_FP8_KIND = {_E4M3: "__NV_E4M3", _E5M2: "__NV_E5M2"}

# (source, destination) element types -> the C++ conversion of one pair and its compile-time
# arguments after the pair (CUDA's own intrinsics where one exists, else cast.h's helpers)
PAIR_CONVERSIONS: dict[tuple[str, str], str] = {
    ("float32", "float16"): "__float22half2_rn",
    ("float16", "float32"): "__half22float2",
    ("float32", "bfloat16"): "__float22bfloat162_rn",
    ("bfloat16", "float32"): "__bfloat1622float2",
    ("bfloat16", "float8_e8m0fnu"): "__tl_cvt_bfloat162_to_e8m0x2",
    ("float8_e8m0fnu", "bfloat16"): "__tl_cvt_e8m0x2_to_bfloat162",
    ("float32", "float8_e8m0fnu"): "__tl_cvt_float2_to_e8m0x2",
    ("float64", "float8_e8m0fnu"): "__tl_cvt_double2_to_e8m0x2",
    ("float8_e4m3fn", "bfloat16"): "__tl_cvt_e4m3x2_to_bfloat162",
    ("float8_e5m2", "bfloat16"): "__tl_cvt_e5m2x2_to_bfloat162",
}
for _fp8, _kind in _FP8_KIND.items():
    PAIR_CONVERSIONS.update({
        ("float32", _fp8): f"__nv_cvt_float2_to_fp8x2, __NV_SATFINITE, {_kind}",
        (_fp8, "float32"): f"__tl_cvt_fp8x2_to_float2<{_kind}>",
        (_fp8, "float16"): f"__tl_cvt_fp8x2_to_half2<{_kind}>",
        ("float16", _fp8): f"__tl_cvt_half2_to_fp8x2<{_kind}>",
        ("bfloat16", _fp8): f"__tl_cvt_bfloat162_to_fp8x2<{_kind}>",
    })


def pair_conversion(src: str, dst: str, target=None) -> str | None:
    """The conversion of a pair of ``src`` elements to ``dst`` (element types), or ``None``
    when only the scalar cast converts them.  With a ``target``: ``None`` also where TVM
    emulates one of the types in integer code for that GPU (float8 before sm_89, bfloat16
    before sm_80), as its code generator then has no such value to convert."""
    conv = PAIR_CONVERSIONS.get((str(src), str(dst)))
    if conv is None or target is None:
        return conv
    return conv if all(native_type(t, target) for t in (str(src), str(dst))) else None


def native_type(dtype: str, target) -> bool:
    """Whether TVM keeps ``dtype`` a CUDA type of its own on ``target`` (the test its
    FP8/BF16 legalization passes make)."""
    from tvm.support import nvcc

    if not (dtype.startswith("float8") or dtype == "bfloat16"):
        return True
    arch = str(target.attrs.get("arch", ""))
    digits = "".join(ch for ch in arch[3:] if ch.isdigit())
    if not arch.startswith("sm_") or len(digits) < 2:
        return False
    version = f"{digits[:-1]}.{digits[-1]}"
    return bool(nvcc.have_fp8(version) if dtype.startswith("float8") else
                nvcc.have_bf16(version))


def _element(dtype) -> str:
    return str(tvm.DataType(str(dtype)).with_lanes(1))


def _emit(c: tvm.ir.Call) -> tvm.ir.PrimExpr:
    dst, src = c.args
    dst_type = dst.args[0].source.dtype
    conv = pair_conversion(_element(src.ty), dst_type)
    return tirx.call_extern("void", f"tl::cvt_pair<{conv}>", dst, src)


CONVERT_PAIR = register_device_op(
    "tl.device.convert_pair",
    Effect(accesses=(Access((0,), Memory.REGISTER, write=True),)),
    _emit,
    "convert the 2 lanes of a vector into dst[i], dst[i + 1] with one paired conversion")


def convert_pair(dst_element: tvm.ir.PrimExpr, src: tvm.ir.PrimExpr) -> tvm.ir.Call:
    """``tl.device.convert_pair(address_of(dst_element), src)``: ``src`` has 2 lanes, its
    element type and ``dst_element``'s buffer's have a :func:`pair_conversion`; the two
    results land at ``dst_element`` and the element after it (a register array)."""
    if tvm.DataType(str(src.ty)).lanes != 2:
        raise ValueError(f"convert_pair converts 2 lanes, got {src.ty}")
    if pair_conversion(_element(src.ty), dst_element.source.dtype) is None:
        raise ValueError(f"no paired conversion from {src.ty} to {dst_element.source.dtype}")
    return call(CONVERT_PAIR, tirx.address_of(dst_element), src)


__all__ = ["CONVERT_PAIR", "PAIR_CONVERSIONS", "convert_pair", "pair_conversion"]
