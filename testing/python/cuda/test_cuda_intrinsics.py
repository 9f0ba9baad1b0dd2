"""tilelang.cuda.intrinsics.make_mma_swizzle_layout: the sm80 operand swizzle under the public
name, row-major with is_smooth."""

import tvm

from tilelang.cuda.intrinsics import make_mma_swizzle_layout
from tilelang.layout.swizzle import make_swizzled_layout


def _offsets(layout, rows, cols):
    return [tuple(int(x) for x in layout.map(r, c)) for r in range(rows) for c in range(cols)]


def test_mma_swizzle_layout_is_the_sm80_swizzle_and_a_permutation():
    buf = tvm.tirx.decl_buffer((64, 32), "float16", scope="shared.dyn")
    lay = make_mma_swizzle_layout(buf)
    ref = make_swizzled_layout(buf)
    got = _offsets(lay, 64, 32)
    assert got == _offsets(ref, 64, 32)
    assert len(set(got)) == 64 * 32            # no two elements share a slot
    assert got != _offsets(make_mma_swizzle_layout(buf, is_smooth=True), 64, 32)


def test_smooth_layout_is_row_major():
    buf = tvm.tirx.decl_buffer((8, 16), "float32", scope="shared.dyn")
    lay = make_mma_swizzle_layout(buf, is_smooth=True)
    assert _offsets(lay, 8, 16) == [(r, c) for r in range(8) for c in range(16)]
