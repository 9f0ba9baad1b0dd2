"""Scheduling hints that do not change a program's result: layout annotations and block
rasterization.  Targets that have no use for them (the CPU) drop them."""

from __future__ import annotations

import logging
from typing import Any

from tvm import tirx
from tvm.script import tirx as _T

from ..errors import LoweringError, TileOpError
from . import region as R
from .base import LayoutContext, LowerContext, TileOp, register

log = logging.getLogger("tilelang")


@register
class AnnotateLayout(TileOp):
    name = "tl.annotate_layout"
    printer = "annotate_layout"
    fields = ("buffer", "layout")
    writes = ()

    def infer_layout(self, ctx: LayoutContext) -> None:
        """A fragment takes the (factored) ``Fragment`` given; a shared tile keeps its layout
        for PlanSharedMemory; a global tensor's layout is not applied."""
        from ..layout import codec
        from ..layout.fragment import Fragment

        lay = codec.decode(self.layout)
        if self.buffer.scope() == "local.fragment":
            if not isinstance(lay, Fragment) or lay.dims is None:
                raise LoweringError(f"T.annotate_layout: fragment {self.buffer.name} needs a "
                                    "Fragment built from factors on CUDA")
            ctx.demand(self.buffer, lay, "T.annotate_layout")
        elif self.buffer.scope() in ("shared", "shared.dyn"):
            ctx.annotate_shared(self.buffer, self.layout)
        return None


@register
class UseSwizzle(TileOp):
    name = "tl.use_swizzle"
    printer = "use_swizzle"
    fields = ("panel_size", "order", "enable")
    writes = ()


@register
class AnnotateSafeValue(TileOp):
    """``T.annotate_safe_value``: from here to the end of the enclosing statement list, copies
    from ``buffer`` read ``value`` for its elements outside the buffer (see
    ``tilelang.transform.safe_values``)."""
    name = "tl.annotate_safe_value"
    printer = "annotate_safe_value"
    fields = ("buffer", "value")
    writes = ()


@register
class AnnotateMinBlocksPerSM(TileOp):
    name = "tl.annotate_min_blocks_per_sm"
    printer = "annotate_min_blocks_per_sm"
    fields = ("count",)
    writes = ()


def annotate_layout(layout_map: dict) -> None:
    """Fix the layout of buffers: ``{buf: tilelang.layout.Layout | Fragment}``; layout
    inference then treats it as given."""
    from ..layout import Layout
    from ..layout.codec import encode

    for buf, layout in layout_map.items():
        if not R.is_buffer(buf):
            raise TileOpError(f"T.annotate_layout: keys must be buffers, got {buf!r}")
        if not isinstance(layout, Layout):
            raise TileOpError(f"T.annotate_layout: layout of {buf.name} must be a "
                              f"tilelang.layout.Layout, got {layout!r}")
        if list(map(int, buf.shape)) != list(layout.shape):
            raise TileOpError(f"T.annotate_layout: layout shape {layout.shape} does not match "
                              f"buffer {buf.name} of shape {R.fmt_shape(buf.shape)}")
        if buf.scope() in ("shared", "shared.dyn"):
            _check_injective(buf, layout)
        if buf.scope() == "global":
            # The public TileLang permutes the tensor's storage; kernels here read and write
            # global tensors row-major, so every kernel sees the same values through logical
            # indices and only the raw memory order differs (docs/compatibility.md).
            log.warning("T.annotate_layout: the layout of global tensor %s is not applied; it "
                        "stays row-major (the values seen through its indices are the same)",
                        buf.name)
        _T.evaluate(AnnotateLayout(buffer=buf, layout=encode(layout)).to_call())


def _check_injective(buf, layout) -> None:
    """Raise :class:`TileOpError` if ``layout`` stores two elements of shared tile ``buf`` in
    one slot (aliased elements would silently overwrite each other)."""
    if getattr(layout, "swizzled", False):
        return  # the library's swizzles are permutations
    hit = layout.collision()
    if hit is None:
        return
    a, b, stored, count = hit
    fmt = lambda v: "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"  # noqa
    raise TileOpError(
        f"T.annotate_layout: the layout of shared buffer `{buf.name}` must be injective (each "
        f"element needs its own slot), but elements {fmt(a)} and {fmt(b)} both map to physical "
        f"coordinates {fmt(stored)} ({count} of {layout.table()[1].shape[0]} elements share a "
        f"slot with an earlier one)")


def use_swizzle(panel_size: int, order: str = "row", enable: bool = True) -> Any:
    """Rasterize blocks in panels of ``panel_size`` rows (``order="row"``) or columns so that
    neighbouring blocks share L2 lines; the mapping of blocks to tiles changes, results do
    not."""
    if order not in ("row", "col", "column"):
        raise TileOpError(f"T.use_swizzle: order must be 'row' or 'col', got {order!r}")
    return UseSwizzle(panel_size=int(panel_size), order="col" if order != "row" else "row",
                      enable=bool(enable)).to_call()


def annotate_safe_value(value_map: dict) -> None:
    """``{tensor: value}``: out-of-range elements that ``T.copy`` reads from ``tensor`` give
    ``value`` instead of 0, for the copies after this statement in its scope (an inner
    annotation of the same tensor wins inside its own scope)."""
    for buf, value in value_map.items():
        if not R.is_buffer(buf):
            raise TileOpError(f"T.annotate_safe_value: keys must be tensors, got {buf!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float, tirx.IntImm,
                                                             tirx.FloatImm)):
            raise TileOpError(f"T.annotate_safe_value: the value for {buf.name} must be a "
                              f"number, got {value!r}")
        v = value.value if isinstance(value, (tirx.IntImm, tirx.FloatImm)) else value
        _T.evaluate(AnnotateSafeValue(buffer=buf, value=tirx.const(v, buf.dtype)).to_call())


def annotate_l2_hit_ratio(ratio_map: dict) -> None:
    """``{tensor: ratio}``: the public TileLang's hint to keep that fraction of a global
    tensor persistent in L2 during the kernel (a CUDA stream access-policy window).  Checked
    and accepted; it has no effect here (results never depend on it)."""
    for buf, ratio in ratio_map.items():
        if not R.is_buffer(buf) or buf.scope() != "global":
            raise TileOpError(f"T.annotate_l2_hit_ratio: keys must be global tensors, got "
                              f"{buf!r}")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or \
                not 0.0 < float(ratio) <= 1.0:
            raise TileOpError(f"T.annotate_l2_hit_ratio: the ratio for {buf.name} must be a "
                              f"number in (0, 1], got {ratio!r}")


def annotate_min_blocks_per_sm(count: int) -> Any:
    """Ask the CUDA compiler to fit at least ``count`` blocks of this kernel on one SM
    (``__launch_bounds__(threads, count)``: it limits registers per thread accordingly).  The
    CPU ignores it."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise TileOpError(f"T.annotate_min_blocks_per_sm: count must be a positive int, got "
                          f"{count!r}")
    return AnnotateMinBlocksPerSM(count=count).to_call()


def _drop(op: TileOp, ctx: LowerContext) -> tirx.Stmt:
    from ..ir_utils import nop

    return nop()


for _op in (AnnotateLayout, UseSwizzle, AnnotateMinBlocksPerSM, AnnotateSafeValue):
    _op.lowering("cpu")(_drop)
AnnotateLayout.lowering("cuda")(_drop)
AnnotateSafeValue.lowering("cuda")(_drop)  # applied to the copies by ApplySafeValues

RASTERIZE = "tl.rasterize"
MIN_BLOCKS = "tl.min_blocks_per_sm"


@AnnotateMinBlocksPerSM.lowering("cuda")
def _min_blocks_cuda(op: AnnotateMinBlocksPerSM, ctx: LowerContext) -> tirx.Stmt:
    """A marker that ``LowerKernelLaunch`` turns into the kernel's launch bounds."""
    return tirx.AttrStmt(tirx.const(0, "int32"), MIN_BLOCKS, tirx.const(op.count, "int32"),
                         tirx.Evaluate(tirx.const(0, "int32")))


@UseSwizzle.lowering("cuda")
def _use_swizzle_cuda(op: UseSwizzle, ctx: LowerContext) -> tirx.Stmt:
    """A marker that ``LowerKernelLaunch`` turns into the remapping of the block indices."""
    if not op.enable:
        return _drop(op, ctx)
    import tvm

    return tirx.AttrStmt(tvm.ir.StringImm(op.order), RASTERIZE,
                         tirx.const(op.panel_size, "int32"), tirx.Evaluate(tirx.const(0, "int32")))
