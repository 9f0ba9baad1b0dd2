"""Swizzled shared layouts: the TMA/GMMA swizzles (32/64/128 bytes, paneled rows), the sm80
swizzle, their ``swizzle_bytes``, text form and placement in the shared arena."""

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx

import tilelang.language as T
from tilelang.layout import codec
from tilelang.layout.swizzle import (SwizzledLayout, alignment_of, gmma_swizzle_bytes,
                                     make_gmma_swizzled_layout, make_swizzled_layout)
from tilelang.utils.np_eval import np_eval


def hardware_offset(r, c, rows, cols, eb, sb):
    """Byte offset the TMA/GMMA hardware uses for element (r, c) of a tile written as panels
    of ``sb`` bytes: row-major inside a panel, then the address bits [4, 4 + log2(sb/16)) XOR
    bits [7, 10) (CUTLASS's Swizzle<B, 4, 3>), on a base aligned to 8 * sb."""
    pe = sb // eb  # elements per panel row
    p, cc = c // pe, c % pe
    addr = p * rows * sb + r * sb + cc * eb
    bits = {32: 1, 64: 2, 128: 3}[sb]
    mask = ((1 << bits) - 1) << 4
    return addr ^ ((addr >> 3) & mask)


def offsets(lay, shape):
    vs = [tirx.Var(f"i{k}", "int32") for k in range(len(shape))]
    out = lay.index_map.map_indices(vs)
    grids = np.indices(shape)
    env = {v.__chandle__(): g for v, g in zip(vs, grids)}
    got = [np_eval(e, env) for e in out]
    off = np.zeros(shape, dtype=np.int64)
    for g, s in zip(got, lay.output_shape):
        off = off * s + np.broadcast_to(g, shape)
    return off


@pytest.mark.parametrize("rows, cols, dtype, sb", [
    (64, 64, "float16", 128), (64, 128, "float16", 128), (128, 256, "float16", 128),
    (16, 32, "float16", 64), (64, 16, "float16", 32), (64, 96, "bfloat16", 64),
    (64, 128, "float8_e4m3fn", 128), (32, 32, "float32", 128), (8, 48, "float16", 32)])
def test_gmma_swizzle_is_the_hardware_address_map(rows, cols, dtype, sb):
    eb = tvm.DataType(dtype).bits // 8
    lay = make_gmma_swizzled_layout([rows, cols], dtype)
    assert lay.swizzle_bytes == sb == gmma_swizzle_bytes(cols, dtype)
    assert lay.paneled == (cols * eb > sb)
    got = offsets(lay, [rows, cols]) * eb
    R, C = np.indices([rows, cols])
    want = np.vectorize(lambda r, c: hardware_offset(r, c, rows, cols, eb, sb))(R, C)
    assert np.array_equal(got, want)
    assert len(np.unique(got)) == rows * cols  # a permutation of the tile


def test_128b_swizzle_xors_the_chunk_with_the_row_within_each_atom():
    lay = make_gmma_swizzled_layout([16, 128], "float16")  # two 128-byte panels
    for r in range(16):
        for c in range(0, 128, 8):
            panel, chunk = c // 64, (c % 64) // 8
            want = panel * 16 * 64 + r * 64 + (chunk ^ (r % 8)) * 8
            assert lay.offset(r, c) == want
            assert lay.offset(r, c + 5) == want + 5


def test_stacked_stages_are_whole_tiles():
    lay = make_gmma_swizzled_layout([3, 64, 64], "float16")
    single = make_gmma_swizzled_layout([64, 64], "float16")
    for s in range(3):
        assert lay.offset(s, 9, 17) == s * 64 * 64 + single.offset(9, 17)


def test_swizzle_bytes_of_the_sm80_swizzle():
    def buf(shape, dtype="float16"):
        return tirx.decl_buffer(shape, dtype, "S")

    assert make_swizzled_layout(buf([64, 64])).swizzle_bytes == 128  # equals the GMMA 128B
    assert make_swizzled_layout(buf([64, 32])).swizzle_bytes == 64
    assert make_swizzled_layout(buf([64, 128])).swizzle_bytes is None  # wide rows: not paneled
    assert make_swizzled_layout(buf([4, 64])).swizzle_bytes is None  # not whole 8-row atoms
    assert make_swizzled_layout(buf([64, 8])).swizzle_bytes == 0  # identity
    a = offsets(make_swizzled_layout(buf([64, 64])), [64, 64])
    b = offsets(make_gmma_swizzled_layout([64, 64], "float16"), [64, 64])
    assert np.array_equal(a, b)


def test_rejects_what_no_swizzle_fits():
    with pytest.raises(ValueError, match="multiple of 32 bytes"):
        make_gmma_swizzled_layout([64, 8], "float16")
    with pytest.raises(ValueError, match="multiple of 8 rows"):
        make_gmma_swizzled_layout([4, 64], "float16")
    with pytest.raises(ValueError, match="panels"):
        SwizzledLayout([64, 96], "float16", 64)


def test_text_form_is_self_describing():
    lay = make_gmma_swizzled_layout([2, 64, 128], "bfloat16", swizzle_bytes=64)
    text = codec.encode(lay)
    assert '"dtype": "bfloat16"' in text and '"panel": 32' in text
    back = codec.decode(text)
    assert isinstance(back, SwizzledLayout) and back.swizzle_bytes == 64
    assert codec.encode(back) == text
    assert np.array_equal(offsets(back, [2, 64, 128]), offsets(lay, [2, 64, 128]))
    assert alignment_of(back) == 512 and alignment_of(make_gmma_swizzled_layout(
        [64, 64], "float16")) == 1024


def test_128b_swizzled_tiles_start_on_1024_bytes_in_the_arena():
    from tilelang.transform import LayoutInference, LowerParallelLoops, LowerTileOps, \
        PlanSharedMemory

    @T.prim_func
    def main(A: T.Tensor((64, 128), "float16"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            small = T.alloc_shared((8,), "float32")
            S = T.alloc_shared((64, 128), "float16")
            T.annotate_layout({S: make_gmma_swizzled_layout(S)})
            T.copy(B, small)
            T.copy(A, S)
            T.copy(S, A)
            T.copy(small, B)

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})  # plain copies into S
    mod = tvm.IRModule({"main": main.with_attr("target", target)})
    mod = LayoutInference()(mod)
    from tilelang.transform.layout_inference import shared_layout_of

    allocs = []
    tvm_ffi.structural_walk(mod["main"].body, (tirx.AllocBuffer, allocs.append))
    lay = shared_layout_of([a for a in allocs if a.buffer.name == "S"][0])
    assert isinstance(lay, SwizzledLayout) and lay.paneled and lay.swizzle_bytes == 128
    for p in (LowerTileOps, LowerParallelLoops, PlanSharedMemory):
        mod = p()(mod)
    decls = {}

    def on_decl(d):
        decls.setdefault(d.buffer.name, d)

    tvm_ffi.structural_walk(mod["main"].body, (tirx.DeclBuffer, on_decl))
    s_off = int(decls["S"].buffer.elem_offset) * 2
    assert int(decls["small"].buffer.elem_offset) == 0
    assert s_off == 1024  # not 128, where the old plan put it
    stores = []
    tvm_ffi.structural_walk(mod["main"].body, (tirx.BufferStore, stores.append))
    s_stores = [s for s in stores if s.buffer.name == "S"]
    assert s_stores and all("^" in str(s.indices[0]) or "xor" in str(s.indices[0])
                            for s in s_stores)
