"""``T.im2col(img, col, nhw_step, c_step, kernel, stride=1, dilation=1, pad=0)``: one tile of
the im2col matrix of an NHWC image, for a convolution computed as a GEMM.

``img`` is ``(N, H, W, C)``; the output has ``OH = (H + 2 * pad - dilation * (kernel - 1) - 1)
// stride + 1`` rows per image (``OW`` likewise), and the im2col matrix has a row per output
position ``m = (n * OH + oh) * OW + ow`` and a column per filter tap ``k = (kh * kernel + kw) * C
+ c`` (the order of a ``(kernel, kernel, C, F)`` filter flattened to ``(kernel * kernel * C,
F)``).  ``col`` (``(block_M, block_K)``) receives the tile at row ``nhw_step * block_M`` and
column ``c_step * block_K``: ``col[i, j] = img[n, oh * stride + kh * dilation - pad, ow * stride
+ kw * dilation - pad, c]``, and 0 where that pixel is padding or the row or column lies past the
matrix.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ..errors import TileOpError
from . import loops
from . import region as R
from .base import LowerContext, TileOp, register


@register
class Im2Col(TileOp):
    name = "tl.im2col"
    printer = "im2col"
    fields = ("img", "col", "nhw_step", "c_step", "kernel", "stride", "dilation", "pad")
    writes = ("col",)


def im2col(img: Any, col: Any, nhw_step: Any, c_step: Any, kernel: int, stride: int = 1,
           dilation: int = 1, pad: int = 0):
    """Fill the tile ``col`` with the im2col tile (``nhw_step``, ``c_step``) of image ``img``
    (see the module doc)."""
    src = R.region_of(img, "T.im2col", "image")
    dst = R.region_of(col, "T.im2col", "column tile")
    if len(R.buffer_of(src).shape) != 4 or len(R.extents(dst)) != 2:
        raise TileOpError(f"T.im2col: the image must be 4-D (N, H, W, C) and the tile 2-D, got "
                          f"{R.describe(src)} and {R.describe(dst)}")
    for name, v, low in (("kernel", kernel, 1), ("stride", stride, 1), ("dilation", dilation, 1),
                         ("pad", pad, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise TileOpError(f"T.im2col: {name} must be an int >= {low}, got {v!r}")
    return Im2Col(img=src, col=dst, nhw_step=nhw_step, c_step=c_step, kernel=kernel,
                  stride=stride, dilation=dilation, pad=pad).to_call()


def _nest(op: Im2Col, kind) -> tirx.Stmt:
    img, col = R.buffer_of(op.img), R.buffer_of(op.col)
    n_img, h, w, c = img.shape
    bm, bk = R.extents(op.col)
    kk, s, d, p = op.kernel, op.stride, op.dilation, op.pad
    oh = tirx.floordiv(h + 2 * p - d * (kk - 1) - 1, s) + 1
    ow = tirx.floordiv(w + 2 * p - d * (kk - 1) - 1, s) + 1

    def body(iv):
        i, j = iv
        m = op.nhw_step * bm + i
        k = op.c_step * bk + j
        n, pix = tirx.floordiv(m, oh * ow), tirx.floormod(m, oh * ow)
        y = tirx.floordiv(pix, ow) * s + tirx.floordiv(k, kk * c) * d - p
        x = tirx.floormod(pix, ow) * s + tirx.floormod(tirx.floordiv(k, c), kk) * d - p
        inside = loops.all_of([m < n_img * oh * ow, k < kk * kk * c, y >= 0, y < h, x >= 0,
                               x < w])
        value = tirx.if_then_else(inside, tirx.BufferLoad(img, [n, y, x, tirx.floormod(k, c)]),
                                  tirx.const(0, img.dtype))
        di = [r.min + v for r, v in zip(op.col.region, iv)]
        return tirx.BufferStore(col, loops.cast(value, col.dtype), di)

    return loops.loop_nest([bm, bk], body, kind=kind, prefix="ic")


@Im2Col.lowering("cpu")
def _im2col_cpu(op: Im2Col, ctx: LowerContext) -> tirx.Stmt:
    return _nest(op, loops.SERIAL)


@Im2Col.lowering("cuda")
def _im2col_cuda(op: Im2Col, ctx: LowerContext) -> tirx.Stmt:
    return loops.over_shared_tiles("T.im2col", [op.col], op.col, lambda kind: _nest(op, kind),
                                   ctx.num_threads)
