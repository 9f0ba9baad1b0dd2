"""``T.copy``: move a region between any two of global, shared, fragment and local memory.

Semantics (every target): the element at local coordinate ``c`` of the source region goes to
local coordinate ``c`` of the destination region, the two regions having the same shape once
unit dimensions are dropped; values are converted to the destination dtype.  An element index
on one side stands for the region of the other side's shape starting there (see
``region.fit_extents``: dimension by dimension when the ranks agree).  Source elements
outside their buffer read as zero, destination elements outside their buffer are not written.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ..device import sm80 as device
from ..errors import LoweringError, TileOpError
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
        s = R.region_of(src, "T.copy", "source", like_shape=R.extents(d))
    else:
        s = R.region_of(src, "T.copy", "source")
        d = R.region_of(dst, "T.copy", "destination", like_shape=R.extents(s))
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


def elementwise_copy(op: Copy, ctx: LowerContext, kind=loops.PARALLEL,
                     whole: int | None = None) -> tirx.Stmt:
    """The copy as a ``T.Parallel`` nest of guarded element moves (reference lowering); the
    nest has the shape of the source (``whole=0``) or destination (``whole=1``) region, unit
    dims included, when given, else of the regions' non-unit dims."""
    src_buf, dst_buf = R.buffer_of(op.src), R.buffer_of(op.dst)
    a = ctx.analyzer

    def body(indices):
        si, di = indices
        value = loops.cast(tirx.BufferLoad(src_buf, si), dst_buf.dtype)
        src_ok = loops.all_of(loops.bounds_checks(src_buf, si, a))
        if src_ok is not None:
            value = tirx.if_then_else(src_ok, value, tirx.const(0, dst_buf.dtype))
        return loops.guard(loops.bounds_checks(dst_buf, di, a), tirx.BufferStore(dst_buf, value, di))

    return loops.element_nest([op.src, op.dst], body, kind=kind, prefix="c", analyzer=a,
                              whole=whole)


Copy.lowering("cpu")(elementwise_copy)

FRAGMENT, LOCAL = "local.fragment", ("local", "local.var")


@Copy.lowering("cuda")
def _copy_cuda(op: Copy, ctx: LowerContext) -> tirx.Stmt:
    """Fragments move by their own layout; local arrays copy per thread; global/shared tiles
    move in coalesced 16-byte vectors (``cp.async`` when a pipelined loop issues the copy)."""
    s_scope, d_scope = R.scope_of(op.src), R.scope_of(op.dst)
    if s_scope in LOCAL or d_scope in LOCAL:
        return elementwise_copy(op, ctx, kind=loops.SERIAL)
    frag = op.src if s_scope == FRAGMENT else op.dst if d_scope == FRAGMENT else None
    if frag is not None:
        buf = R.buffer_of(frag)
        if not R.same_shape(R.extents(frag), buf.shape):
            raise LoweringError(f"T.copy: on CUDA a fragment ({buf.name}) is copied whole, not as "
                                f"the slice {R.describe(frag)}")
        # the nest has the fragment's shape (unit dims too) so that its layout partitions it
        whole = 0 if frag is op.src else 1
        vec = _capped(op, loops.vector_width([op.src, op.dst], ctx.analyzer, max_bytes=16))
        return loops.with_layout(elementwise_copy(op, ctx, whole=whole), ctx.layout(buf), vec)
    vec = _capped(op, loops.vector_width([op.src, op.dst], ctx.analyzer))
    shape = [R.as_int(e) for e in op.shape()]
    # a single element: a one-element nest over the destination's (unit) dims
    whole = None if shape else 1
    if not shape:
        shape = [R.as_int(e) for e in R.extents(op.dst)]
    if any(e is None for e in shape):
        raise LoweringError(f"T.copy: tile {R.describe(op.dst)} needs a static shape on CUDA")
    if ctx.async_copy and s_scope == "global" and d_scope.startswith("shared"):
        nbytes = vec * loops.elem_bytes(R.buffer_of(op.dst).dtype)
        if nbytes in (4, 8, 16):
            return _cp_async(op, ctx, shape, vec, nbytes)
    from ..layout.fragment import elementwise

    return loops.with_layout(elementwise_copy(op, ctx, whole=whole),
                             elementwise(shape, ctx.num_threads, vec), vec)


def _capped(op: Copy, vec: int) -> int:
    """``coalesced_width`` (elements), when given, bounds the vector width."""
    w = int(op.coalesced_width or 0)
    while w > 0 and vec > w:
        vec //= 2
    return max(1, vec)


def _cp_async(op: Copy, ctx: LowerContext, shape, vec: int, nbytes: int) -> tirx.Stmt:
    """One ``cp.async`` of ``vec`` elements per (thread, register); rows or vectors outside
    the source read as zeros."""
    from ..layout.fragment import elementwise

    src_buf, dst_buf = R.buffer_of(op.src), R.buffer_of(op.dst)
    chunks = shape[:-1] + [shape[-1] // vec]

    def body(iv):
        lv = iv[:-1] + [iv[-1] * vec]
        si = loops.region_indices(op.src, lv)
        di = loops.region_indices(op.dst, lv)
        ok = loops.all_of(loops.bounds_checks(src_buf, si, ctx.analyzer))
        call = device.cp_async(
            tirx.address_of(tirx.BufferLoad(dst_buf, di)),
            tirx.address_of(tirx.BufferLoad(src_buf, si)), nbytes,
            ok if ok is not None else tirx.const(True, "bool"))
        return tirx.Evaluate(call)

    nest = loops.loop_nest(chunks, body, kind=loops.PARALLEL, prefix="c", analyzer=ctx.analyzer)
    return loops.with_layout(nest, elementwise(chunks, ctx.num_threads, 1))
