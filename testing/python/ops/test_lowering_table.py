"""Each tile op has one table of lowerings: (target family, predicate on the op and its
LowerContext, lowering), tried in order, the entry without a predicate last."""

import pytest
import tvm
from tvm import tirx

from tilelang.errors import LoweringError
from tilelang.ops.base import LowerContext, TileOp, register
from tilelang.ops.copy import Copy
from tilelang.ops.gemm import Gemm

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
CPU = tvm.target.Target({"kind": "llvm"})


@register
class _Probe(TileOp):
    """A test op whose lowering says which entry ran."""

    name = "tl.test_lowering_table"
    printer = "test_lowering_table"
    fields = ("level",)


def _mark(text):
    return lambda op, ctx: tirx.Evaluate(tvm.ir.StringImm(text))


_Probe.lowering("cuda", when=lambda op, ctx: op.level >= 2)(_mark("fast"))
_Probe.lowering("cuda", when=lambda op, ctx: op.level >= 1)(_mark("medium"))
_Probe.lowering("cuda")(_mark("fallback"))


def _ran(level, target=CUDA):
    ctx = LowerContext(target=target, family=target.kind.name if target is CUDA else "cpu")
    return str(_Probe(level=level).lower(ctx).value.value)


def test_the_first_entry_that_applies_runs():
    assert [_ran(x) for x in (3, 2, 1, 0)] == ["fast", "fast", "medium", "fallback"]


def test_a_family_without_an_entry_is_refused_by_name():
    with pytest.raises(LoweringError, match="T.test_lowering_table has no lowering for "
                                            "target llvm"):
        _ran(0, CPU)


def test_an_entry_after_the_catch_all_is_refused():
    with pytest.raises(ValueError, match="without a predicate is already registered"):
        _Probe.lowering("cuda", when=lambda op, ctx: True)(_mark("never"))


def test_copy_and_gemm_tables_put_the_capability_entries_first():
    for op in (Copy, Gemm):
        cuda = [when for family, when, _ in op._lowerings if family == "cuda"]
        assert len(cuda) >= 2 and cuda[-1] is None and all(cuda[:-1])
