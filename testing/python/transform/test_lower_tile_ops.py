"""LowerTileOps alone: tile-op calls become guarded loop nests."""

import pytest
from tvm import tirx

from tilelang.errors import LoweringError
from tilelang.transform import LowerTileOps

from helpers import bind, calls_of, copy_kernel, loops_of


def test_no_tile_op_calls_remain():
    mod = bind(copy_kernel())
    assert calls_of(mod["main"]) == ["tl.copy", "tl.copy"]
    out = LowerTileOps()(mod)
    assert calls_of(out["main"]) == []


def test_copy_becomes_parallel_nest_with_edge_guard():
    out = LowerTileOps()(bind(copy_kernel(M=40, bM=16)))["main"]
    text = out.script()
    parallel = [lp for lp in loops_of(out) if lp.kind == tirx.ForKind.PARALLEL]
    assert len(parallel) == 6  # two copies and the T.Parallel body, 2-D each
    # 40 rows in blocks of 16: the last block reads and writes past the end -> guarded
    assert "if bx * 16 + c0 < 40" in text
    assert "T.if_then_else(bx * 16 + c0 < 40" in text


def test_guards_are_dropped_when_provably_in_bounds():
    out = LowerTileOps()(bind(copy_kernel(M=48, bM=16)))["main"]
    assert "if_then_else" not in out.script() and "if bx" not in out.script()


def test_requires_target():
    import tvm

    with pytest.raises(Exception, match="target"):
        LowerTileOps()(tvm.IRModule({"main": copy_kernel()}))


def test_unknown_target_family_lowering_is_reported():
    from tilelang.ops import LowerContext
    from tilelang.ops.copy import Copy
    import tvm

    op = Copy(src=None, dst=None, coalesced_width=0, disable_tma=0, eviction_policy="")
    ctx = LowerContext(target=tvm.target.Target({"kind": "llvm"}), family="metal")
    with pytest.raises(LoweringError, match="T.copy has no lowering"):
        op.lower(ctx)
