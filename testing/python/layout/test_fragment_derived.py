"""Layouts derived from others for what a ``T.Parallel`` access reads: ``coarsen`` (an index
``i // c``), ``resized`` (padding to a loop's extent) and ``elementwise``'s ``spans`` (thread
digits kept inside a window of a dim)."""

import numpy as np

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
