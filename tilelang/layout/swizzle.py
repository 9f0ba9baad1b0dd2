"""Swizzled shared-memory layouts.

The 16-byte chunk ``c`` of row ``r`` of a row-major tile moves to chunk
``c ^ ((r // (8 // G)) % G)`` within its group of ``G = min(8, chunks per row)`` chunks, so that
the 8 rows an ``ldmatrix`` or a column of ``cp.async`` touches land in 8 different bank groups.
``src/tl_templates/cuda/common.h`` (``tl::Tile``) implements the same map for the device code;
the two must agree.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from .layout import Layout


def _group(row_elems: int, elem_bytes: int) -> tuple[int, int, int]:
    chunk = max(1, 16 // elem_bytes)
    chunks = row_elems // chunk
    group = 8 if chunks >= 8 else chunks
    rows_per_line = 1 if group >= 8 else (8 // group if group else 1)
    return chunk, group, rows_per_line


def can_swizzle(row_elems: int, dtype: str) -> bool:
    """Rows made of whole 16-byte chunks, a power of two of them below 8 or a multiple of 8."""
    eb = tvm.DataType(dtype).bits // 8
    chunk, group, _ = _group(row_elems, max(1, eb))
    chunks = row_elems // chunk if eb >= 1 else 0
    return (eb >= 1 and row_elems % chunk == 0 and group >= 2 and (group & (group - 1)) == 0
            and chunks % group == 0)


def swizzle_offset(row, col, row_elems: int, dtype: str):
    """Element offset of (row, col) in a swizzled row-major tile (a TIR expression)."""
    eb = max(1, tvm.DataType(dtype).bits // 8)
    chunk, group, rpl = _group(row_elems, eb)
    c = tirx.floordiv(col, chunk)
    low = tirx.bitwise_and(tirx.bitwise_xor(c, tirx.floordiv(row, rpl)), group - 1)
    sw = tirx.bitwise_or(tirx.bitwise_and(c, ~(group - 1)), low)
    return row * row_elems + sw * chunk + tirx.floormod(col, chunk)


def make_swizzled_layout(buffer, k_major: bool = True) -> Layout:
    """The conflict-free swizzle for a 2-D (or stacked 2-D) shared tile of ``buffer``'s shape
    and dtype; identity when rows are shorter than two 16-byte chunks."""
    shape = [int(s) for s in buffer.shape]
    if len(shape) < 2 or not can_swizzle(shape[-1], buffer.dtype):
        return Layout(shape, lambda *i: list(i))
    row_elems = shape[-1]

    def fn(*idx):
        *lead, r, c = idx
        off = swizzle_offset(r, c, row_elems, buffer.dtype)
        return [*lead, tirx.floordiv(off, row_elems), tirx.floormod(off, row_elems)]

    lay = Layout(shape, fn)
    lay.swizzled = True
    return lay
