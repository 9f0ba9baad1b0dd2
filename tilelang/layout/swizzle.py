"""Swizzled shared-memory layouts.

A swizzled tile is row-major over its last two dims, split into *panels* of ``P`` elements
along the row (panel ``p`` holds columns ``[p P, (p + 1) P)`` of every row; panels are stored
one after another, a panel being ``rows x P`` row-major).  Inside a panel the 16-byte chunk
``c`` of row ``r`` moves to chunk ``c ^ ((r // (8 // G)) % G)`` within its group of
``G = min(8, chunks per panel row)`` chunks.  Leading dims (pipeline stages) stack whole tiles.

Two families use this map:

- the conflict-free swizzle of the sm80 path (:func:`make_swizzled_layout`): one panel per
  row, so that the 8 rows an ``ldmatrix`` or a column of ``cp.async`` touches land in 8
  different bank groups; ``src/tl_templates/cuda/common.h`` (``tl::Tile``) implements the same
  map for the device code and the two must agree;
- the TMA/GMMA swizzles of 32, 64 or 128 bytes (:func:`make_gmma_swizzled_layout`): panels of
  exactly ``swizzle_bytes``, so the chunk index is XORed with ``(r % 8)`` (128B), ``(r // 2) % 4``
  (64B) or ``(r // 4) % 2`` (32B) inside each 8-row atom -- the address bits [4, 7) XOR [7, 10)
  that the hardware applies, given a tile base aligned to ``8 * swizzle_bytes`` (PlanSharedMemory
  aligns such tiles).

Every layout carries ``swizzle_bytes``: the TMA/GMMA swizzle mode it equals (0 = plain
row-major; 32, 64, 128), or ``None`` when neither unit can produce it (e.g. an sm80 swizzle of
rows wider than 128 bytes, whose chunk groups are not paneled).
"""

from __future__ import annotations

from typing import Sequence

import tvm
from tvm import tirx

from .layout import Layout

GMMA_SWIZZLES = (128, 64, 32)  # the swizzle modes of TMA and wgmma descriptors, widest first


def _elem_bytes(dtype: str) -> int:
    return max(1, tvm.DataType(dtype).bits // 8)


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
    """Element offset of (row, col) in a row of ``row_elems`` swizzled as one panel (a TIR
    expression, or an int for ints)."""
    eb = _elem_bytes(dtype)
    chunk, group, rpl = _group(row_elems, eb)
    c = tirx.floordiv(col, chunk)
    low = tirx.bitwise_and(tirx.bitwise_xor(c, tirx.floordiv(row, rpl)), group - 1)
    sw = tirx.bitwise_or(tirx.bitwise_and(c, ~(group - 1)), low)
    return row * row_elems + sw * chunk + tirx.floormod(col, chunk)


class SwizzledLayout(Layout):
    """A shared tile of ``shape`` and ``dtype`` swizzled in panels of ``panel`` elements (see
    the module docstring).  ``map`` gives ``[*lead, off // row, off % row]`` where ``off`` is
    the element offset inside the 2-D tile, so the output shape is the tile's shape."""

    swizzled = True

    def __init__(self, shape: Sequence[int], dtype: str, panel: int):
        shape = [int(s) for s in shape]
        if len(shape) < 2:
            raise ValueError(f"a swizzled layout needs a 2-D (or stacked 2-D) tile, got {shape}")
        rows, row = shape[-2], shape[-1]
        if panel <= 0 or row % panel or not can_swizzle(panel, dtype):
            raise ValueError(f"cannot swizzle rows of {row} {dtype} in panels of {panel} "
                             "elements: a panel must be 2, 4 or a multiple of 8 16-byte chunks "
                             "and divide the row")
        self.dtype = str(dtype)
        self.panel = int(panel)
        eb = _elem_bytes(self.dtype)
        pb = self.panel * eb
        self.swizzle_bytes = pb if pb in GMMA_SWIZZLES and rows % 8 == 0 else None

        def fn(*idx):
            *lead, r, c = idx
            if self.panel == row:
                off = swizzle_offset(r, c, row, self.dtype)
            else:
                p = tirx.floordiv(c, self.panel)
                off = p * (rows * self.panel) + swizzle_offset(
                    r, tirx.floormod(c, self.panel), self.panel, self.dtype)
            return [*lead, tirx.floordiv(off, row), tirx.floormod(off, row)]

        super().__init__(shape, fn)

    @property
    def output_shape(self) -> list:
        return list(self.shape)

    @property
    def paneled(self) -> bool:
        return self.panel != self.shape[-1]

    def offset(self, *idx) -> int:
        """The element offset of ``idx`` from the tile's start (ints; for tests and tools)."""
        out = [int(x) for x in self.map(*idx)]
        off = 0
        for i, s in zip(out, self.shape):
            off = off * s + i
        return off

    def __repr__(self) -> str:
        mode = f"{self.swizzle_bytes}B" if self.swizzle_bytes else "sm80"
        return f"SwizzledLayout({self.shape}, {self.dtype}, panel={self.panel}, {mode})"


def make_swizzled_layout(buffer, k_major: bool = True) -> Layout:
    """The conflict-free swizzle of the sm80 path for a 2-D (or stacked 2-D) shared tile of
    ``buffer``'s shape and dtype (one panel per row); identity when rows are shorter than two
    16-byte chunks.  ``k_major`` is accepted for compatibility and ignored."""
    shape = [int(s) for s in buffer.shape]
    if len(shape) < 2 or not can_swizzle(shape[-1], buffer.dtype):
        lay = Layout(shape, lambda *i: list(i))
        lay.swizzle_bytes = 0
        return lay
    return SwizzledLayout(shape, buffer.dtype, shape[-1])


def gmma_swizzle_bytes(row_elems: int, dtype: str) -> int | None:
    """The widest TMA/GMMA swizzle (128, 64, 32 bytes) whose panel divides a row of
    ``row_elems`` elements, or ``None`` when the row is not a multiple of 32 bytes."""
    nbytes = row_elems * tvm.DataType(dtype).bits // 8
    for s in GMMA_SWIZZLES:
        if nbytes % s == 0:
            return s
    return None


def make_gmma_swizzled_layout(shape, dtype: str | None = None,
                              swizzle_bytes: int | None = None) -> SwizzledLayout:
    """The TMA/GMMA-compatible layout of a shared tile (``shape``: a buffer or a shape list):
    rows split into panels of ``swizzle_bytes`` (default: the widest of 128/64/32 that divides
    the row), each swizzled as TMA writes and wgmma reads it.  Rows must be a multiple of 8."""
    if dtype is None:
        shape, dtype = list(shape.shape), shape.dtype
    shape = [int(s) for s in shape]
    sb = swizzle_bytes if swizzle_bytes is not None else gmma_swizzle_bytes(shape[-1], dtype)
    if sb not in GMMA_SWIZZLES:
        raise ValueError(f"no TMA/GMMA swizzle fits rows of {shape[-1]} {dtype} "
                         f"(swizzle_bytes={swizzle_bytes}); rows must be a multiple of 32 bytes")
    if len(shape) < 2 or shape[-2] % 8:
        raise ValueError(f"a TMA/GMMA swizzled tile needs a multiple of 8 rows, got {shape}")
    lay = SwizzledLayout(shape, dtype, sb * 8 // tvm.DataType(dtype).bits)
    assert lay.swizzle_bytes == sb
    return lay


def swizzle_bytes_of(layout) -> int | None:
    """The TMA/GMMA swizzle mode a shared layout equals (0 none, 32, 64, 128), or ``None``
    when it has none (custom index maps, sm80 swizzles of wide rows)."""
    return getattr(layout, "swizzle_bytes", None)


def alignment_of(layout) -> int:
    """Bytes a tile with ``layout`` must be aligned to in shared memory so that the swizzle
    computed from tile offsets equals the hardware's, computed from address bits."""
    sb = swizzle_bytes_of(layout)
    return 8 * sb if sb else 16
