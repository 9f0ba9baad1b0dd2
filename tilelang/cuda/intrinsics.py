"""Shared-memory layouts for tensor-core operands, under the public TileLang's names."""

from __future__ import annotations

from ..layout.layout import Layout
from ..layout.swizzle import make_swizzled_layout


def make_mma_swizzle_layout(buffer, is_smooth: bool = False) -> Layout:
    """The layout of a 2-D shared tile ``buffer`` that ``ldmatrix``/``mma.sync`` read without
    bank conflicts (the sm80 swizzle, identity where rows are too short to swizzle);
    ``is_smooth`` asks for the plain row-major layout instead."""
    if is_smooth:
        shape = [int(s) for s in buffer.shape]
        return Layout(shape, lambda *i: list(i))
    return make_swizzled_layout(buffer)


__all__ = ["make_mma_swizzle_layout"]
