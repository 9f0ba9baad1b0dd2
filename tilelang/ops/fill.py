"""``T.fill`` and ``T.clear``: set every element of a region to one value."""

from __future__ import annotations

from typing import Any

from tvm import tirx

from . import loops
from . import region as R
from .base import LowerContext, TileOp, register


@register
class Fill(TileOp):
    name = "tl.fill"
    printer = "fill"
    fields = ("dst", "value")


def fill(buffer: Any, value: Any):
    """Set every element of ``buffer`` (a buffer or a slice) to ``value``, converted to the
    buffer's dtype; elements outside the buffer are not written."""
    dst = R.region_of(buffer, "T.fill", "destination")
    dtype = R.buffer_of(dst).dtype
    v = tirx.const(value, dtype) if isinstance(value, (int, float, bool)) else loops.cast(value, dtype)
    return Fill(dst=dst, value=v).to_call()


def clear(buffer: Any):
    """``T.fill(buffer, 0)``."""
    return fill(buffer, 0)


@Fill.lowering("cpu")
def elementwise_fill(op: Fill, ctx: LowerContext, kind=loops.PARALLEL) -> tirx.Stmt:
    buf = R.buffer_of(op.dst)
    value = op.value if not isinstance(op.value, int) else tirx.const(op.value, buf.dtype)

    def body(iv):
        idx = loops.region_indices(op.dst, iv)
        return loops.guard(loops.bounds_checks(buf, idx, ctx.analyzer),
                           tirx.BufferStore(buf, value, idx))

    return loops.loop_nest(R.squeeze(R.extents(op.dst)), body, kind=kind, prefix="f",
                           analyzer=ctx.analyzer)
