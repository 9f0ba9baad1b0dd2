"""Layouts derived from others for what a ``T.Parallel`` access reads: ``coarsen`` (an index
``i // c``), ``resized`` (padding to a loop's extent) and ``elementwise``'s ``spans`` (thread
digits kept inside a window of a dim), ``repeat`` (a layout tiled), and the 8x8 mma
fragments."""

import numpy as np
import pytest

from tilelang.layout.fragment import THREAD, elementwise, mma_accumulator


def test_coarsen_gives_each_reader_the_element_it_reads():
    lay = mma_accumulator(32, 64, 2, 2)  # columns: 8 x (4 threads x 2 registers)
    half = lay.coarsen(1, 2)  # y[i, j // 2]: the register pair collapses
    assert half.shape == [32, 32] and half.num_regs * 2 == lay.num_regs
    np.testing.assert_array_equal(lay.thread_table()[:, ::2], half.thread_table())
    np.testing.assert_array_equal(lay.thread_table()[:, 1::2], half.thread_table())
    assert sorted(np.unique(half.reg_table()).tolist()) == list(range(half.num_regs))
    quarter = lay.coarsen(1, 4)  # j // 4 spans two threads: they become replicas of y
    assert quarter.shape == [32, 16] and quarter.replicate == 2
    np.testing.assert_array_equal(lay.thread_table()[:, ::4], quarter.thread_table())
    assert lay.coarsen(1, 3) is None


def test_resized_pads_or_clips_within_the_digits():
    lay = elementwise([64], 128)
    small = lay.resized([32])
    assert small.shape == [32] and small.padded_shape == [64] and small.is_padded()
    np.testing.assert_array_equal(small.thread_table(), lay.thread_table()[:32])
    assert small.resized([64]).same_as(lay)
    assert lay.resized([128]) is None


def test_spans_keep_thread_digits_inside_the_window():
    free = elementwise([4, 256], 128, vec=4)
    assert any(x.kind == THREAD for x in free.dims[0])  # rows spread over threads
    held = elementwise([4, 256], 128, vec=4, spans=[1, None])
    assert all(x.kind != THREAD for x in held.dims[0])
    win = elementwise([32, 64], 128, vec=4, spans=[None, 8])
    assert win.window(1, 8) is not None
    th = win.thread_table()
    for kk in range(8):
        np.testing.assert_array_equal(th[:, kk * 8:(kk + 1) * 8], th[:, :8])
    assert elementwise([32, 64], 128, vec=4).window(1, 8) is None


def test_gemm_8x8_fragments_hold_two_consecutive_elements_per_thread():
    from tilelang.layout import make_gemm_fragment_8x8, make_gemm_fragment_8x8_transposed

    plain, trans = make_gemm_fragment_8x8(), make_gemm_fragment_8x8_transposed()
    i, j = np.meshgrid(range(8), range(8), indexing="ij")
    assert (plain.thread_table() == 4 * i + j // 2).all()
    assert (plain.reg_table() == j % 2).all()
    assert (trans.thread_table() == plain.thread_table().T).all()
    assert (trans.reg_table() == plain.reg_table().T).all()


def test_repeat_tiles_the_layout_in_registers_or_threads():
    from tilelang.layout import make_gemm_fragment_8x8

    base = make_gemm_fragment_8x8()
    regs = base.repeat([2, 3])
    assert regs.shape == [16, 24] and regs.num_threads == 32 and regs.num_regs == 12
    t, r = regs.thread_table(), regs.reg_table()
    for a in range(2):
        for b in range(3):
            tile = (slice(8 * a, 8 * a + 8), slice(8 * b, 8 * b + 8))
            assert (t[tile] == base.thread_table()).all()
            assert (r[tile] == base.reg_table() + 2 * (3 * a + b)).all()
    by_dim1 = base.repeat([2, 3], lower_dim_first=False).reg_table()
    assert by_dim1[8, 0] == 2 and by_dim1[0, 8] == 4
    threads = base.repeat([2, 1], repeat_on_thread=True)
    assert threads.num_threads == 64 and threads.num_regs == 2
    assert (threads.thread_table()[8:] == base.thread_table() + 32).all()
    with pytest.raises(ValueError, match="one positive count per dim"):
        base.repeat([2])
