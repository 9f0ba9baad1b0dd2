"""Fragment layouts: forward and inverse maps agree, derived layouts, ownership checks."""

import numpy as np
import pytest
from tvm import tirx
from tvm.sym import Analyzer

from tilelang.layout import Fragment, Layout, make_swizzled_layout
from tilelang.layout import codec
from tilelang.layout.fragment import check_ownership, elementwise, mma_accumulator


def table(f):
    return f.thread_table(), f.reg_table()


@pytest.mark.parametrize("lay", [mma_accumulator(64, 64, 2, 2), mma_accumulator(128, 128, 2, 2),
                                 mma_accumulator(64, 128, 4, 1), elementwise([16, 64], 128, 4),
                                 elementwise([64], 128), elementwise([8, 8, 8], 64, 2)])
def test_each_thread_register_pair_holds_one_element(lay):
    th, rg = table(lay)
    pairs = set(zip(th.ravel().tolist(), rg.ravel().tolist()))
    assert len(pairs) == th.size
    assert th.max() < lay.num_threads and rg.max() < lay.num_regs


def test_inverse_is_the_inverse_of_forward():
    lay = mma_accumulator(64, 64, 2, 2)
    tx, r = tirx.Var("tx", "int32"), tirx.Var("r", "int32")
    idx = lay.inverse(tx, r)
    a = Analyzer()
    th, rg = table(lay)
    for t in (0, 5, 37, 127):
        for reg in (0, 3, 17, 31):
            i, j = (int(a.simplify(tvm_sub(e, {tx: t, r: reg}))) for e in idx)
            assert th[i, j] == t and rg[i, j] == reg


def tvm_sub(e, m):
    from tilelang.ir_utils import substitute

    return substitute(e, {k: tirx.const(v, "int32") for k, v in m.items()})


def test_mma_accumulator_matches_the_documented_map():
    lay = mma_accumulator(32, 32, 1, 1)
    th, rg = table(lay)
    # lane l, register (mi*NI + ni)*4 + h*2 + c -> row 16mi + 8h + l/4, col 8ni + 2(l%4) + c
    for lane in range(32):
        for mi in range(2):
            for ni in range(4):
                for h in range(2):
                    for c in range(2):
                        i, j = 16 * mi + 8 * h + lane // 4, 8 * ni + 2 * (lane % 4) + c
                        assert th[i, j] == lane and rg[i, j] == (mi * 4 + ni) * 4 + h * 2 + c


def test_reduce_replicates_over_the_row_threads():
    lay = mma_accumulator(64, 64, 4, 1)
    row = lay.reduce(1)
    assert row.shape == [64] and row.num_regs == 2 and row.replicate == 4
    assert check_ownership(lay, row, lambda idx: [idx[0]])
    col = lay.reduce(0)
    assert col.num_regs == 16 and check_ownership(lay, col, lambda idx: [idx[1]])


def test_ownership_detects_a_mismatch():
    lay = mma_accumulator(64, 64, 4, 1)
    other = elementwise([64, 64], 128, 4)
    assert not check_ownership(lay, other, lambda idx: [idx[0], idx[1]])


def test_codec_round_trip():
    for lay in (mma_accumulator(64, 64, 2, 2), mma_accumulator(64, 64, 4, 1).reduce(1)):
        back = codec.decode(codec.encode(lay))
        assert back.same_as(lay)


def test_describe_draws_threads_and_registers():
    text = mma_accumulator(16, 8, 1, 1).describe().splitlines()
    assert len(text) == 16 and text[0].split()[:2] == ["T0:0", "T0:1"]


def test_swizzle_matches_the_device_formula():
    """Same map as tl::Tile<ROW, EB, true>::offset in src/tl_templates/cuda/common.h."""
    def device(row, col, ROW, EB):
        chunk_elems = 16 // EB
        chunks = ROW // chunk_elems
        group = 8 if chunks >= 8 else chunks
        rows_per_line = 1 if group >= 8 else 8 // group
        if group < 2:
            return row * ROW + col
        c = col // chunk_elems
        sw = (c & ~(group - 1)) | ((c ^ (row // rows_per_line)) & (group - 1))
        return row * ROW + sw * chunk_elems + col % chunk_elems

    from tilelang.utils.np_eval import np_eval
    from tilelang.layout.swizzle import swizzle_offset

    for rows, cols, dtype, eb in [(64, 32, "float16", 2), (32, 64, "float16", 2),
                                  (16, 128, "float16", 2), (32, 32, "float32", 4),
                                  (32, 64, "int8", 1)]:
        r, c = tirx.Var("r", "int32"), tirx.Var("c", "int32")
        e = swizzle_offset(r, c, cols, dtype)
        R, C = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        got = np_eval(e, {r.__chandle__(): R, c.__chandle__(): C})
        want = np.vectorize(lambda a, b: device(a, b, cols, eb))(R, C)
        assert np.array_equal(got, want)
        assert len(np.unique(got)) == rows * cols  # a permutation


def test_user_layout_and_fragment_constructors():
    lay = Layout((4, 8), lambda i, j: [j, i])
    assert [int(x) for x in lay.map(1, 2)] == [2, 1]
    frag = Fragment((4, 4), forward_thread_fn=lambda i, j: i * 4 + j)
    assert frag.thread(1, 2) == 6 and frag.threads() == 16
    buf = tirx.decl_buffer([64, 64], "float16", "S")
    assert getattr(make_swizzled_layout(buf), "swizzled", False)
