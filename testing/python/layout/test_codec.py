"""Layouts carried in the IR as text: self-describing, deterministic, parsed back exactly."""

import subprocess
import sys

import pytest
from tvm import tirx

from tilelang.layout import Fragment, Layout, codec
from tilelang.layout.fragment import Factor


def swizzle_like(i, j):
    return [i * 32 + (j ^ (i % 8)), tirx.Select(i < 3, i, j), ~j, tirx.max(i, j), i << 2,
            tirx.if_then_else(i < 2, i, 3), tirx.Cast("int64", i), i // 3 - j, tirx.floormod(i, 5)]


def test_index_map_round_trips():
    lay = Layout([16, 32], swizzle_like)
    text = codec.encode(lay)
    back = codec.decode(text)
    assert back.shape == [16, 32]
    assert codec.encode(back) == text
    for idx in [(0, 0), (3, 5), (15, 31), (7, 9)]:
        assert [str(x) for x in back.map(*idx)] == [str(x) for x in lay.map(*idx)]


def test_encoding_is_the_same_in_another_process():
    """No process-global state: a fresh process encodes the same layout to the same text, and
    the text decodes there (the old codec stored only the map's position in a local table)."""
    here = codec.encode(Layout([8, 8], lambda i, j: [j, i]))
    prog = ("from tilelang.layout import Layout, codec\n"
            "codec.encode(Layout([8, 8], lambda i, j: [i, j]))\n"  # another map first
            "print(codec.encode(Layout([8, 8], lambda i, j: [j, i])))\n")
    there = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True,
                           check=True).stdout.strip().splitlines()[-1]
    assert there == here
    assert codec.encode(Layout([8, 8], lambda i, j: [i, j])) != here
    assert [int(x) for x in codec.decode(there).map(2, 5)] == [5, 2]


def test_fragment_and_swizzle_round_trip():
    frag = Fragment.from_factors([4, 8], [[Factor(0, 4, "thread", 8)],
                                          [Factor(1, 8, "reg", 1)]], name="f")
    assert codec.encode(codec.decode(codec.encode(frag))) == codec.encode(frag)


def test_layout_over_a_free_variable_is_rejected():
    n = tirx.Var("n", "int32")
    with pytest.raises(ValueError, match="none of its indices"):
        codec.encode(Layout([4, 4], lambda i, j: [i * n + j]))
