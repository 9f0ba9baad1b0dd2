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


@Fill.lowering("cuda")
def _fill_cuda(op: Fill, ctx: LowerContext) -> tirx.Stmt:
    from ..layout.fragment import elementwise

    buf = R.buffer_of(op.dst)
    if buf.scope() in ("local", "local.var"):
        return elementwise_fill(op, ctx, kind=loops.SERIAL)
    if buf.scope() == "local.fragment":
        if not R.same_shape(R.extents(op.dst), buf.shape):
            # a slice of a fragment: the loop runs over the slice, partitioned like the fragment
            return _fill_fragment_slice(op, ctx)
        return loops.with_layout(elementwise_fill(op, ctx), ctx.layout(buf))
    shape = [R.as_int(e) for e in R.squeeze(R.extents(op.dst))]
    vec = loops.vector_width([op.dst], ctx.analyzer)
    return loops.with_layout(elementwise_fill(op, ctx), elementwise(shape, ctx.num_threads, vec),
                             vec)


def _fill_fragment_slice(op: Fill, ctx: LowerContext) -> tirx.Stmt:
    """Fill every element of the fragment for which the slice condition holds."""
    buf = R.buffer_of(op.dst)
    value = op.value if not isinstance(op.value, int) else tirx.const(op.value, buf.dtype)

    def body(iv):
        conds = []
        for v, r in zip(iv, op.dst.region):
            conds += [v >= r.min, v < r.min + r.extent]
        return loops.guard(conds, tirx.BufferStore(buf, value, list(iv)))

    nest = loops.loop_nest([R.as_int(s) for s in buf.shape], body, kind=loops.PARALLEL,
                           prefix="f")
    return loops.with_layout(nest, ctx.layout(buf))


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
