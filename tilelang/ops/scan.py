"""Inclusive scans of a tile along one dimension: ``T.cumsum`` (running sum) and ``T.cummax``
(running maximum).

``dst[..., k, ...] = src[..., 0, ...] (op) ... (op) src[..., k, ...]`` (from the end with
``reverse=True``); ``dst`` defaults to ``src`` (in place) and must have ``src``'s shape.  Both
may be buffers or regions of shared tiles, fragments, local buffers or tensors.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ..errors import LoweringError, TileOpError
from . import loops
from . import region as R
from .base import LowerContext, TileOp, register


@register
class Cumsum(TileOp):
    name = "tl.cumsum"
    printer = "cumsum"
    fields = ("src", "dst", "dim", "reverse")
    writes = ("dst",)

    @staticmethod
    def combine(acc, x):
        return acc + x


@register
class Cummax(TileOp):
    name = "tl.cummax"
    printer = "cummax"
    fields = ("src", "dst", "dim", "reverse")
    writes = ("dst",)

    @staticmethod
    def combine(acc, x):
        return tirx.max(acc, x)


def _scan(cls, opname: str, src: Any, dst: Any, dim: int, reverse: bool,
          annotations: dict | None):
    from .hints import check_hints

    check_hints(opname, annotations)
    s = R.region_of(src, opname, "source")
    d = R.region_of(dst if dst is not None else src, opname, "destination")
    ss, ds = R.extents(s), R.extents(d)
    if not -len(ss) <= dim < len(ss):
        raise TileOpError(
            f"{opname}: dim={dim} is out of range for source {R.describe(s)} of shape "
            f"{R.fmt_shape(ss)}"
        )
    for role, r in (("source", s), ("destination", d)):
        if str(R.buffer_of(r).dtype) == "bool":
            raise TileOpError(f"{opname}: the {role} {R.describe(r)} is bool; scan an int8 "
                              "or int32 copy of it (T.copy converts)")
    if not R.same_shape(ss, ds):
        raise TileOpError(
            f"{opname}: source {R.describe(s)} {R.fmt_shape(ss)} and destination "
            f"{R.describe(d)} {R.fmt_shape(ds)} must have the same shape"
        )
    return cls(src=s, dst=d, dim=dim % len(ss), reverse=bool(reverse)).to_call()


def cumsum(src: Any, dst: Any = None, dim: int = 0, reverse: bool = False,
           annotations: dict | None = None):
    """Inclusive prefix sum of ``src`` along ``dim`` into ``dst`` (default: in place);
    ``annotations`` are scheduling hints (``tilelang.ops.hints``)."""
    return _scan(Cumsum, "T.cumsum", src, dst, dim, reverse, annotations)


def cummax(src: Any, dst: Any = None, dim: int = 0, reverse: bool = False,
           annotations: dict | None = None):
    """Inclusive running maximum of ``src`` along ``dim`` into ``dst`` (default: in place);
    ``annotations`` are scheduling hints (``tilelang.ops.hints``)."""
    return _scan(Cummax, "T.cummax", src, dst, dim, reverse, annotations)


SHARED = ("shared", "shared.dyn")


def _scan_cuda(op, ctx: LowerContext) -> tirx.Stmt:
    """One thread scans each line of a shared tile; the lines are spread over the threads.
    A fragment (or per-thread) operand is staged through a shared tile of the region's shape:
    copied in by the threads holding it, scanned, copied back (the barriers between the
    steps come from the thread-sync pass)."""
    from ..layout.fragment import elementwise

    ext = [R.as_int(e) for e in R.extents(op.src)]
    staged = [reg for reg in (op.src, op.dst) if R.scope_of(reg) not in SHARED]
    for reg in staged:
        if R.scope_of(reg) != "local.fragment":
            raise LoweringError(f"T.{op.printer} on CUDA scans shared tiles and fragments; "
                                f"{R.describe(reg)} is {R.scope_of(reg)!r}")
    if staged and any(e is None for e in ext):
        raise LoweringError(f"T.{op.printer} of a fragment needs a constant shape on CUDA, "
                            f"got {R.fmt_shape(R.extents(op.src))}")
    stmts = []
    src, dst = op.src, op.dst
    if staged:
        dt = R.buffer_of(op.dst).dtype
        tile = tirx.decl_buffer(ext, dt, f"{R.buffer_of(op.src).name}_scan", scope="shared.dyn")
        stmts.append(tirx.AllocBuffer(tile))
        whole = R.full_region(tile)
        if op.src in staged:
            stmts.append(_move(op.src, whole, ctx, into_tile=True))
            src = whole
        else:
            stmts.append(_move(op.src, whole, ctx, into_tile=True, shared=True))
            src = whole
        dst = whole
    scan = op.replace(src=src, dst=dst)
    outer = [e for k, e in enumerate(ext) if k != op.dim]
    if not outer:
        stmts.append(tirx.IfThenElse(ctx.thread_var == 0, _scan_cpu(scan, ctx), None))
    else:
        stmts.append(loops.with_layout(_scan_cpu(scan, ctx, kind=loops.PARALLEL),
                                       elementwise(outer, ctx.num_threads)))
    if staged:
        stmts.append(_move(op.dst, dst, ctx, into_tile=False,
                           shared=R.scope_of(op.dst) in SHARED))
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _move(reg, tile_region, ctx: LowerContext, into_tile: bool, shared: bool = False):
    """Copy between a fragment (or shared) region ``reg`` and the whole staging tile, as a
    ``T.Parallel`` nest laid out like the fragment (element-wise for shared)."""
    from ..layout.fragment import elementwise

    buf, tile = R.buffer_of(reg), R.buffer_of(tile_region)
    ext = [R.as_int(e) for e in R.extents(reg)]

    def body(iv):
        ri = [r.min + v for r, v in zip(reg.region, iv)]
        if into_tile:
            return tirx.BufferStore(tile, loops.cast(tirx.BufferLoad(buf, ri), tile.dtype),
                                    list(iv))
        return tirx.BufferStore(buf, loops.cast(tirx.BufferLoad(tile, list(iv)), buf.dtype), ri)

    nest = loops.loop_nest(ext, body, kind=loops.PARALLEL, prefix="s")
    whole = R.same_shape(R.extents(reg), buf.shape)
    if not shared and whole and ctx.layout(buf) is not None:
        return loops.with_layout(nest, ctx.layout(buf))
    if not shared:
        raise LoweringError(f"a scan of part of fragment {buf.name} on CUDA: scan the whole "
                            "fragment, or a shared tile")
    return loops.with_layout(nest, elementwise(ext, ctx.num_threads))


def _scan_cpu(op, ctx: LowerContext, kind=loops.SERIAL) -> tirx.Stmt:
    src, dst = R.buffer_of(op.src), R.buffer_of(op.dst)
    ext = R.extents(op.src)
    n = ext[op.dim]
    outer = [e for k, e in enumerate(ext) if k != op.dim]

    def at(region, o, k):
        full = list(o[: op.dim]) + [k] + list(o[op.dim:])
        return [r.min + v for r, v in zip(region.region, full)]

    def body(o):
        def step(kv):
            k = (n - 1 - kv[0]) if op.reverse else kv[0]
            prev = (k + 1) if op.reverse else (k - 1)
            first = (k == n - 1) if op.reverse else (k == 0)
            x = loops.cast(tirx.BufferLoad(src, at(op.src, o, k)), dst.dtype)
            value = tirx.if_then_else(first, x,
                                      op.combine(tirx.BufferLoad(dst, at(op.dst, o, prev)), x))
            return tirx.BufferStore(dst, value, at(op.dst, o, k))

        return loops.loop_nest([n], step, kind=loops.SERIAL, prefix="k")

    return loops.loop_nest(outer, body, kind=kind, prefix="o")


for _cls in (Cumsum, Cummax):
    _cls.lowering("cuda")(_scan_cuda)
    _cls.lowering("cpu")(_scan_cpu)
