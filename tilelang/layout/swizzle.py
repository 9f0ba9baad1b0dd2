"""Swizzled shared-memory layouts: XOR the 16-byte chunk index of a row with the row number so
that threads reading a column of chunks hit different banks."""

from __future__ import annotations

from tvm import tirx

from .layout import Layout


def make_swizzled_layout(buffer, k_major: bool = True) -> Layout:
    """The conflict-free swizzle for a 2-D shared tile of ``buffer``'s shape and dtype: rows
    of up to 128 bytes, 16-byte chunks permuted by ``row % chunks_per_row``."""
    shape = [int(s) for s in buffer.shape]
    if len(shape) < 2:
        return Layout(shape, lambda *i: list(i))
    bits = _bits(buffer.dtype)
    elems_per_chunk = max(1, 128 // bits)
    row_elems = shape[-1]
    chunks = min(8, max(1, row_elems // elems_per_chunk))

    def fn(*idx):
        *lead, r, c = idx
        chunk = c // elems_per_chunk
        return [*lead, r, (chunk ^ (r % chunks)) * elems_per_chunk + c % elems_per_chunk]

    return Layout(shape, fn)


def _bits(dtype: str) -> int:
    import tvm

    return tvm.DataType(dtype).bits
