"""``T.cumsum``: inclusive prefix sum of a tile along one dimension.

``dst[..., k, ...] = src[..., 0, ...] + ... + src[..., k, ...]`` (from the end with
``reverse=True``); ``dst`` defaults to ``src`` (in place) and must have ``src``'s shape.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ..errors import TileOpError
from . import loops
from . import region as R
from .base import LowerContext, TileOp, register


@register
class Cumsum(TileOp):
    name = "tl.cumsum"
    printer = "cumsum"
    fields = ("src", "dst", "dim", "reverse")


def cumsum(src: Any, dst: Any = None, dim: int = 0, reverse: bool = False,
           annotations: dict | None = None):
    """Inclusive prefix sum of ``src`` along ``dim`` into ``dst`` (default: in place);
    ``annotations`` are scheduling hints (``tilelang.ops.hints``)."""
    from .hints import check_hints

    check_hints("T.cumsum", annotations)
    s = R.region_of(src, "T.cumsum", "source")
    d = R.region_of(dst if dst is not None else src, "T.cumsum", "destination")
    ss, ds = R.extents(s), R.extents(d)
    if not -len(ss) <= dim < len(ss):
        raise TileOpError(
            f"T.cumsum: dim={dim} is out of range for source {R.describe(s)} of shape "
            f"{R.fmt_shape(ss)}"
        )
    if not R.same_shape(ss, ds):
        raise TileOpError(
            f"T.cumsum: source {R.describe(s)} {R.fmt_shape(ss)} and destination "
            f"{R.describe(d)} {R.fmt_shape(ds)} must have the same shape"
        )
    return Cumsum(src=s, dst=d, dim=dim % len(ss), reverse=bool(reverse)).to_call()


@Cumsum.lowering("cuda")
def _cumsum_cuda(op: Cumsum, ctx: LowerContext) -> tirx.Stmt:
    """One thread scans each line of a shared tile; the lines are spread over the threads."""
    from ..errors import LoweringError
    from ..layout.fragment import elementwise

    for reg in (op.src, op.dst):
        if R.scope_of(reg) not in ("shared", "shared.dyn"):
            raise LoweringError(f"T.cumsum on CUDA scans shared tiles; {R.describe(reg)} is "
                                f"{R.scope_of(reg)!r}")
    outer = [R.as_int(e) for k, e in enumerate(R.extents(op.src)) if k != op.dim]
    if not outer:
        nest = _cumsum_cpu(op, ctx)
        return tirx.IfThenElse(ctx.thread_var == 0, nest, None)
    return loops.with_layout(_cumsum_cpu(op, ctx, kind=loops.PARALLEL),
                             elementwise(outer, ctx.num_threads))


@Cumsum.lowering("cpu")
def _cumsum_cpu(op: Cumsum, ctx: LowerContext, kind=loops.SERIAL) -> tirx.Stmt:
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
            carry = tirx.if_then_else(first, tirx.const(0, dst.dtype),
                                      tirx.BufferLoad(dst, at(op.dst, o, prev)))
            return tirx.BufferStore(dst, carry + x, at(op.dst, o, k))

        return loops.loop_nest([n], step, kind=loops.SERIAL, prefix="k")

    return loops.loop_nest(outer, body, kind=kind, prefix="o")
