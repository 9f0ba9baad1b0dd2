"""``T.copy``: move a region between any two of global, shared, fragment and local memory.

Semantics (every target): the element at local coordinate ``c`` of the source region goes to
local coordinate ``c`` of the destination region, the two regions having the same shape once
unit dimensions are dropped; values are converted to the destination dtype.  Source elements
outside their buffer read as zero, destination elements outside their buffer are not written.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ..errors import TileOpError
from . import loops
from . import region as R
from .base import LowerContext, TileOp, register


@register
class Copy(TileOp):
    name = "tl.copy"
    printer = "copy"
    fields = ("src", "dst", "coalesced_width", "disable_tma", "eviction_policy")

    def shape(self) -> list:
        return R.squeeze(R.extents(self.dst))


def copy(
    src: Any,
    dst: Any,
    coalesced_width: int | None = None,
    disable_tma: bool = False,
    eviction_policy: str | None = None,
):
    """Copy ``src`` to ``dst`` (buffers, slices, or element indices meaning "the region of
    the other side's shape starting here").  ``coalesced_width`` bounds the vector width of
    the generated accesses, ``disable_tma`` keeps a Hopper copy off the TMA unit and
    ``eviction_policy`` (``"evict_first"``, ``"evict_last"``) is an L2 hint."""
    if R.is_element(src) and R.is_element(dst):
        raise TileOpError(
            f"T.copy: both source {src} and destination {dst} are single elements; "
            "give at least one side as a buffer or a slice"
        )
    if R.is_element(src):
        d = R.region_of(dst, "T.copy", "destination")
        s = R.region_of(src, "T.copy", "source", like_shape=R.squeeze(R.extents(d)))
    else:
        s = R.region_of(src, "T.copy", "source")
        d = R.region_of(dst, "T.copy", "destination", like_shape=R.squeeze(R.extents(s)))
    ss, ds = R.squeeze(R.extents(s)), R.squeeze(R.extents(d))
    if not R.same_shape(ss, ds):
        raise TileOpError(
            f"T.copy: source {R.describe(s)} has shape {R.fmt_shape(R.extents(s))} but "
            f"destination {R.describe(d)} has shape {R.fmt_shape(R.extents(d))} "
            f"({R.fmt_shape(ss)} vs {R.fmt_shape(ds)} without unit dims)"
        )
    if eviction_policy not in (None, "evict_normal", "evict_first", "evict_last"):
        raise TileOpError(f"T.copy: unknown eviction_policy {eviction_policy!r}")
    return Copy(
        src=s,
        dst=d,
        coalesced_width=int(coalesced_width or 0),
        disable_tma=bool(disable_tma),
        eviction_policy=eviction_policy or "",
    ).to_call()


def elementwise_copy(op: Copy, ctx: LowerContext, kind=loops.PARALLEL) -> tirx.Stmt:
    """The copy as a ``T.Parallel`` nest of guarded element moves (reference lowering)."""
    src_buf, dst_buf = R.buffer_of(op.src), R.buffer_of(op.dst)
    a = ctx.analyzer

    def body(iv):
        si = loops.region_indices(op.src, iv)
        di = loops.region_indices(op.dst, iv)
        value = loops.cast(tirx.BufferLoad(src_buf, si), dst_buf.dtype)
        src_ok = loops.all_of(loops.bounds_checks(src_buf, si, a))
        if src_ok is not None:
            value = tirx.if_then_else(src_ok, value, tirx.const(0, dst_buf.dtype))
        return loops.guard(loops.bounds_checks(dst_buf, di, a), tirx.BufferStore(dst_buf, value, di))

    return loops.loop_nest(op.shape(), body, kind=kind, prefix="c", analyzer=a)


Copy.lowering("cpu")(elementwise_copy)
