"""benchmarks/common.py: interleaved timing rounds rotate the order of the contenders, so that
each takes every place in a round (a GPU at its power limit slows down as a round goes on)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmarks"))
import common  # noqa: E402


def test_rounds_rotate_the_order(monkeypatch):
    timed = []
    monkeypatch.setattr(common, "bench_ms", lambda fn: fn())
    contenders = {n: (lambda n=n: timed.append(n) or len(timed)) for n in "abc"}
    ms, runs = common.interleaved_ms(contenders, 4)
    assert "".join(timed) == "abc" + "bca" + "cab" + "abc"
    assert runs["a"] == [1, 6, 8, 10] and ms["a"] == 7.0  # each one's median over its rounds
