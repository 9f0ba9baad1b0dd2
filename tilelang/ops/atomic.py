"""``T.atomic_add | atomic_max | atomic_min``: read-modify-write that concurrent blocks may
apply to the same element without losing updates.

``dst`` is an element (``C[i, j]``) with a scalar ``value``, or a region with a region or
buffer ``value`` of the same shape once unit dims are dropped (element-wise); an element ``dst``
with a tile ``value`` stands for the region of ``value``'s shape starting there, as in
``T.copy``.  The result is converted to ``dst``'s dtype.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ..device import sm80 as device
from ..errors import TileOpError
from . import loops
from . import region as R
from .base import LowerContext, TileOp, register

# Marks lowered atomics so that the CPU launch knows to run the grid's blocks in order.
ATOMIC_MARK = "tl.atomic_region"


@register
class Atomic(TileOp):
    name = "tl.atomic"
    printer = "atomic"
    fields = ("kind", "dst", "value")


def _atomic(kind: str, dst: Any, value: Any):
    opname = f"T.atomic_{kind}"
    value = getattr(value, "scalar", value)
    if R.is_buffer(value) or R.is_region(value):
        v = R.region_of(value, opname, "value")
        d = R.region_of(dst, opname, "destination", like_shape=R.extents(v))
        if not R.same_shape(R.squeeze(R.extents(v)), R.squeeze(R.extents(d))):
            raise TileOpError(
                f"{opname}: value {R.describe(v)} {R.fmt_shape(R.extents(v))} and destination "
                f"{R.describe(d)} {R.fmt_shape(R.extents(d))} differ in shape"
            )
    else:
        d = R.region_of(dst, opname, "destination")
        if R.squeeze(R.extents(d)):
            raise TileOpError(f"{opname}: a scalar value needs a single-element destination, "
                              f"got {R.describe(d)}")
        dtype = R.buffer_of(d).dtype
        v = tirx.const(value, dtype) if isinstance(value, (int, float)) else loops.cast(value, dtype)
    return Atomic(kind=kind, dst=d, value=v).to_call()


def atomic_add(dst: Any, value: Any):
    """``dst += value`` atomically (element or region)."""
    return _atomic("add", dst, value)


def atomic_max(dst: Any, value: Any):
    """``dst = max(dst, value)`` atomically (element or region)."""
    return _atomic("max", dst, value)


def atomic_min(dst: Any, value: Any):
    """``dst = min(dst, value)`` atomically (element or region)."""
    return _atomic("min", dst, value)


def apply(kind: str, old, new):
    if kind == "add":
        return old + new
    return tirx.max(old, new) if kind == "max" else tirx.min(old, new)


@Atomic.lowering("cuda")
def _atomic_cuda(op: Atomic, ctx: LowerContext) -> tirx.Stmt:
    """An element update is made by one thread (the owner of a fragment value, else thread 0);
    a region update by the owner of each element."""
    from ..layout.fragment import elementwise

    dst = R.buffer_of(op.dst)
    if not R.is_region(op.value):
        di = [r.min for r in op.dst.region]
        call = tirx.Evaluate(device.atomic(op.kind, tirx.address_of(tirx.BufferLoad(dst, di)),
                                           op.value, dst.dtype))
        if ctx.in_parallel:  # one update per loop element, made by the thread that runs it
            return call
        owner = tirx.const(0, "int32")
        loads = []
        import tvm_ffi
        import tvm

        tvm_ffi.structural_walk(op.value, (tvm.ir.TensorLoad, loads.append))
        for x in loads:
            if x.source.scope() == "local.fragment":
                owner = ctx.layout(x.source).forward(list(x.indices))[0]
                break
        return tirx.IfThenElse(ctx.thread_var == owner, call, None)
    vb = R.buffer_of(op.value)
    # a whole fragment value: the nest has its shape (unit dims too) and follows its layout
    by_fragment = vb.scope() == "local.fragment" and R.same_shape(R.extents(op.value), vb.shape)

    def body(indices):
        di, vi = indices
        val = loops.cast(tirx.BufferLoad(vb, vi), dst.dtype)
        call = tirx.Evaluate(device.atomic(op.kind, tirx.address_of(tirx.BufferLoad(dst, di)),
                                           val, dst.dtype))
        return loops.guard(loops.bounds_checks(dst, di, ctx.analyzer), call)

    nest = loops.element_nest([op.dst, op.value], body, kind=loops.PARALLEL, prefix="a",
                              analyzer=ctx.analyzer, whole=1 if by_fragment else None)
    if by_fragment:
        return loops.with_layout(nest, ctx.layout(vb))
    shape = [R.as_int(e) for e in R.squeeze(R.extents(op.dst))]
    return loops.with_layout(nest, elementwise(shape, ctx.num_threads))


@Atomic.lowering("cpu")
def _atomic_cpu(op: Atomic, ctx: LowerContext) -> tirx.Stmt:
    """Plain read-modify-write: the CPU backend runs the blocks of a grid that contains atomics
    one after another (see ``LowerKernelLaunch``), so no update can be lost."""
    dst = R.buffer_of(op.dst)
    is_region = R.is_region(op.value)

    def body(indices):
        di = indices[0]
        if is_region:
            vb, vi = R.buffer_of(op.value), indices[1]
            val = loops.cast(tirx.BufferLoad(vb, vi), dst.dtype)
            ok = loops.bounds_checks(vb, vi, ctx.analyzer)
        else:
            val, ok = op.value, []
        upd = tirx.BufferStore(dst, apply(op.kind, tirx.BufferLoad(dst, di), val), di)
        return loops.guard(loops.bounds_checks(dst, di, ctx.analyzer) + ok, upd)

    regions = [op.dst, op.value] if is_region else [op.dst]
    nest = loops.element_nest(regions, body, kind=loops.SERIAL, prefix="a",
                              analyzer=ctx.analyzer)
    return tirx.AttrStmt(tirx.const(0, "int32"), ATOMIC_MARK, tirx.const(1, "int32"), nest)
