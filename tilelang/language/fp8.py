"""``tilelang.language.fp8``: which 8-bit float types the target's hardware computes with.

``determine_fp8_type("e4m3")`` is ``T.float8_e4m3fn`` and ``determine_fp8_type("e5m2")`` is
``T.float8_e5m2``: the OCP formats of NVIDIA's tensor cores (sm_89, sm_90) and of the CPU
backend.  (The public TileLang also answers the AMD ``fnuz`` variants on gfx94x; there is no
ROCm target here.)"""

from __future__ import annotations

from ..errors import DSLError

_FORMATS = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def determine_fp8_type(fp8_type: str = "e4m3"):
    """The dtype of the 8-bit float format ``fp8_type`` ("e4m3" or "e5m2") on this target."""
    import tilelang.language as T

    if fp8_type not in _FORMATS:
        raise DSLError(f"determine_fp8_type: fp8_type is 'e4m3' or 'e5m2', got {fp8_type!r}")
    return getattr(T, _FORMATS[fp8_type])


__all__ = ["determine_fp8_type"]
