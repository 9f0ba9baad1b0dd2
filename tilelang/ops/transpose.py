"""``T.transpose(src, dst)``: ``dst[j, i] = src[i, j]`` for 2-D tiles (``dst`` has ``src``'s
shape reversed).  On CUDA the elements are spread over the block's threads; both tiles must
be shared (or per-thread) buffers there."""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ..errors import TileOpError
from . import loops
from . import region as R
from .base import LowerContext, TileOp, register


@register
class Transpose(TileOp):
    name = "tl.transpose"
    printer = "transpose"
    fields = ("src", "dst")
    writes = ("dst",)


def transpose(src: Any, dst: Any):
    """``dst = src.T`` for 2-D tiles or regions."""
    s = R.region_of(src, "T.transpose", "source")
    d = R.region_of(dst, "T.transpose", "destination")
    ss, ds = R.extents(s), R.extents(d)
    if len(ss) != 2 or not R.same_shape(list(reversed(ss)), ds):
        raise TileOpError(f"T.transpose: source {R.describe(s)} of shape {R.fmt_shape(ss)} "
                          f"needs a 2-D destination of shape {R.fmt_shape(list(reversed(ss)))}, "
                          f"got {R.describe(d)} of shape {R.fmt_shape(ds)}")
    return Transpose(src=s, dst=d).to_call()


def _nest(op: Transpose, kind) -> tirx.Stmt:
    src, dst = R.buffer_of(op.src), R.buffer_of(op.dst)

    def body(iv):
        i, j = iv
        si = [op.src.region[0].min + i, op.src.region[1].min + j]
        di = [op.dst.region[0].min + j, op.dst.region[1].min + i]
        return tirx.BufferStore(dst, loops.cast(tirx.BufferLoad(src, si), dst.dtype), di)

    return loops.loop_nest(R.extents(op.src), body, kind=kind, prefix="t")


@Transpose.lowering("cpu")
def _transpose_cpu(op: Transpose, ctx: LowerContext) -> tirx.Stmt:
    return _nest(op, loops.SERIAL)


@Transpose.lowering("cuda")
def _transpose_cuda(op: Transpose, ctx: LowerContext) -> tirx.Stmt:
    return loops.over_shared_tiles("T.transpose", [op.src, op.dst], op.src,
                                   lambda kind: _nest(op, kind), ctx.num_threads)
