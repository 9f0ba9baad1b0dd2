"""``RoundLowPrecisionStores``: on the CPU backend a value stored into a bfloat16 tile is
rounded to bfloat16, as it is on a GPU.

TVM's ``BF16ComputeLegalize`` computes bfloat16 in float32 and, for buffers allocated inside the
kernel (shared tiles, fragments, locals), promotes the storage to float32 too, dropping the
``float32 -> bfloat16 -> float32`` round trip of a store and a later load.  A bf16 fragment would
then hold full float32 values on the CPU and the reference would not match the GPU.  This pass
writes the rounding out in float32 arithmetic (round to nearest even on the bit pattern, NaN
kept), which the legalizer keeps.  Tensors passed to the kernel are stored as real bfloat16 by
TVM's own conversion, which rounds the bit pattern with no NaN check (a float32 NaN whose payload
lies in its low 16 bits became inf or a zero): a NaN stored there first has its low bits
cleared and its quiet bit set, so it stays a NaN of the same sign, as on a GPU.  A conversion
to bfloat16 inside an expression (``T.cast(T.cast(x, "bfloat16"), "float32")``) is rounded the
same way, where the legalizer would drop it.  CPU only.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from ..engine.target import is_cpu
from ..ir_utils import StmtMutator, map_nodes
from .passes import function_pass, target_of

BF16 = "bfloat16"


def _typed(x: tirx.PrimExpr, elem: str) -> tuple:
    """(``elem`` with ``x``'s lanes, a function making constants of that type)."""
    lanes = int(tvm.DataType(str(x.ty.dtype)).lanes)
    ty = elem if lanes == 1 else f"{elem}x{lanes}"
    return ty, (lambda v: tirx.const(v, elem) if lanes == 1 else
                tirx.Broadcast(tirx.const(v, elem), lanes))


def round_to_bf16(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """The float32 value of ``x`` (float32, or a float32 vector) rounded to the nearest
    bfloat16, ties to even."""
    u32, c = _typed(x, "uint32")
    f32, _ = _typed(x, "float32")
    bits = tirx.reinterpret(u32, x)
    lsb = tirx.bitwise_and(tirx.shift_right(bits, c(16)), c(1))
    rounded = tirx.bitwise_and(bits + c(0x7FFF) + lsb, c(0xFFFF0000))
    return tirx.Select(tirx.isnan(x), x, tirx.reinterpret(f32, rounded))


def quiet_nan_for_bf16(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """``x`` (float32, or a float32 vector), a NaN made one whose bits below the bfloat16
    ones are 0 (quiet, same sign), so that truncating or rounding the bit pattern keeps it a
    NaN."""
    u32, c = _typed(x, "uint32")
    f32, _ = _typed(x, "float32")
    bits = tirx.reinterpret(u32, x)
    kept = tirx.bitwise_or(tirx.bitwise_and(bits, c(0xFFFF0000)), c(0x00400000))
    return tirx.Select(tirx.isnan(x), tirx.reinterpret(f32, kept), x)


class _Round(StmtMutator):
    def __init__(self, params: set):
        self.params = params

    def visit_BufferStore(self, s):
        if str(s.buffer.dtype) != BF16:
            return s
        lanes = int(tvm.DataType(str(s.value.ty.dtype)).lanes)
        suffix = "" if lanes == 1 else f"x{lanes}"
        x = tirx.Cast(f"float32{suffix}", s.value)
        kept = quiet_nan_for_bf16 if s.buffer.__chandle__() in self.params else round_to_bf16
        value = tirx.Cast(f"{BF16}{suffix}", kept(x))
        return tirx.BufferStore(s.buffer, value, list(s.indices))


@function_pass("tl.RoundLowPrecisionStores")
def RoundLowPrecisionStores(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if not is_cpu(target_of(func)):
        return func
    params = {p.__chandle__() for p in func.params if is_buffer_var(p)}
    body = map_nodes(_Round(params)(func.body), [(tirx.Cast, _rounded_cast)])
    return func.with_body(body)


def _rounded_cast(c):
    """A conversion to bfloat16 of a wider value, rounded to bfloat16 (TVM computes bfloat16
    in float32 and drops the round trip of ``T.cast(T.cast(x, "bfloat16"), "float32")``)."""
    ty = str(c.ty.dtype) if isinstance(c.ty, tvm.ir.PrimType) else ""
    src = str(c.value.ty.dtype) if isinstance(c.value.ty, tvm.ir.PrimType) else ""
    if not ty.startswith(BF16) or src.startswith(BF16) or not src.startswith("float"):
        return c
    lanes = int(tvm.DataType(ty).lanes)
    wide = tirx.Cast("float32" if lanes == 1 else f"float32x{lanes}", c.value)
    return tirx.Cast(ty, round_to_bf16(wide))
