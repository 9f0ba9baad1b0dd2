"""``T.fill`` and ``T.clear``: set every element of a region to one value."""

from __future__ import annotations

import numbers
from typing import Any

import tvm
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from ..errors import DSLError, DSLTypeError, LoweringError
from . import loops
from . import region as R
from .base import LowerContext, TileOp, register


@register
class Fill(TileOp):
    name = "tl.fill"
    printer = "fill"
    fields = ("dst", "value")
    writes = ("dst",)


def fill(buffer: Any, value: Any):
    """Set every element of ``buffer`` (a buffer or a slice) to ``value`` (a number or a
    numeric scalar expression), converted to the buffer's dtype; elements outside the buffer
    are not written."""
    dst = R.region_of(buffer, "T.fill", "destination")
    return Fill(dst=dst, value=_value(value, R.buffer_of(dst))).to_call()


def _numeric(dtype: str) -> bool:
    """Whether a scalar of ``dtype`` converts to a number (not a handle or a pointer)."""
    try:
        code = tvm.DataType(dtype).type_code
    except Exception:  # a pointer or another type that is no DataType
        return False
    return code != tvm.DataTypeCode.HANDLE and dtype != "void"


def _value(value: Any, buf) -> Any:
    """``value`` (a Python number or a numeric scalar expression) converted to ``buf``'s dtype;
    another type raises :class:`DSLTypeError`, a constant the dtype cannot hold
    :class:`DSLError`."""
    if isinstance(value, numbers.Real):
        try:
            return tirx.const(value.item() if hasattr(value, "item") else value, buf.dtype)
        except Exception:  # TVM's range check: the constant does not fit the dtype
            raise DSLError(f"T.fill: the value {value!r} does not fit {buf.name}'s dtype "
                           f"{buf.dtype}") from None
    if is_buffer_var(value) or tvm.ir.is_prim_expr(value):
        dtype = loops.dtype_of(value)
        if _numeric(dtype):
            return loops.cast(value, buf.dtype)
        raise DSLTypeError(f"T.fill: the value {value} has dtype {dtype}, which cannot be "
                           f"converted to {buf.name}'s dtype {buf.dtype}")
    raise DSLTypeError(f"T.fill: the value must be a number or a scalar expression, got "
                       f"{value!r} ({type(value).__name__}) for {buf.name}")


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
    if None in shape:  # a region of run-time extent (x[a:b])
        return _fill_strided(op, ctx)
    if not shape:  # one element (a 1-element tensor): thread 0 stores it
        return tirx.IfThenElse(ctx.thread_var == 0, elementwise_fill(op, ctx, kind=loops.SERIAL),
                               None)
    vec = loops.vector_width([op.dst], ctx.analyzer)
    return loops.with_layout(elementwise_fill(op, ctx), elementwise(shape, ctx.num_threads, vec),
                             vec)


def _fill_strided(op: Fill, ctx: LowerContext) -> tirx.Stmt:
    """A global or shared region of run-time extent: the group's threads take its elements in
    turn (element ``t``, ``t + threads``, ... in row-major order)."""
    buf = R.buffer_of(op.dst)
    if buf.scope() not in ("global", "shared", "shared.dyn"):
        raise LoweringError(f"T.fill on CUDA: {R.describe(op.dst)} has a run-time extent; only "
                            "global and shared regions may")
    value = op.value if not isinstance(op.value, int) else tirx.const(op.value, buf.dtype)
    dims = R.squeeze(R.extents(op.dst))
    dt = loops.index_dtype(*dims)
    ext = [loops.cast(e, dt) for e in dims]
    total = tirx.const(1, dt)
    for e in ext:
        total = total * e
    n = tirx.const(ctx.num_threads, dt)
    k = tirx.Var("fk", dt)
    flat = k * n + loops.cast(ctx.thread_var, dt)
    idx = loops.region_indices(op.dst, loops.unflatten(flat, ext))
    store = loops.guard([flat < total] + loops.bounds_checks(buf, idx, ctx.analyzer),
                        tirx.BufferStore(buf, value, idx))
    return tirx.For(k, tirx.const(0, dt), tirx.floordiv(total + n - 1, n), tirx.ForKind.SERIAL,
                    store)


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
