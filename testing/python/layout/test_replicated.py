"""The replicated fragment layout, and the check that a loop writing a replicated fragment
updates every copy."""

import numpy as np

from tilelang.layout.fragment import (check_replicas_written, elementwise, is_replicated,
                                      replicated)


def test_replicated_layout_puts_every_element_in_every_thread():
    f = replicated([3, 5], 64)
    assert is_replicated(f) and f.num_regs == 15 and f.replicate == 64
    assert (f.thread_table() == 0).all()
    assert f.reg_table().tolist() == np.arange(15).reshape(3, 5).tolist()
    assert not is_replicated(elementwise([16], 64))


def test_a_write_must_reach_every_copy():
    frag = replicated([16], 64)
    identity = lambda idx: idx  # noqa: E731
    # every thread computes every element: all copies written
    assert check_replicas_written(replicated([16], 64), frag, identity)
    # one thread per element: the other 63 copies keep stale values
    assert not check_replicas_written(elementwise([16], 64), frag, identity)
    # a fragment without copies is always fine
    assert check_replicas_written(elementwise([64], 64), elementwise([64], 64), identity)
