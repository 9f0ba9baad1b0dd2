"""``AssumeTripCounts``: the device compiler learns that a loop runs at least once where the
launch guarantees it.

Expects: lowered CUDA kernels (launch attributes for the block and thread indices).
Guarantees: a serial loop whose trip count is not a constant but is at least 1 for every block
and thread of the launch (``T.min(n_tiles, bx + 1)`` of a causal attention, over the loop
variables around it too) is preceded by ``tl::assume_trip_count(n)``: the fact, as
``__builtin_assume(n >= 1)``, for the device compiler, which cannot derive it from the
integer arithmetic it is given.  Without it the compiler keeps a path around the loop, and
ptxas then serializes every wgmma of a loop that leaves a wgmma group in flight across its
exit (the warp-specialized consumer loop: "wgmma.mma_async instructions are serialized").
Nothing else changes.  CPU: unchanged.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.sym import Analyzer

from ..engine.target import is_cpu
from ..ir_utils import StmtMutator, seq
from .passes import function_pass, target_of


def assume_trip_count(extent) -> tirx.Stmt:
    """The statement telling the device compiler that ``extent >= 1``."""
    return tirx.Evaluate(tirx.call_extern("int32", "tl::assume_trip_count", extent))


class _Loops(StmtMutator):
    def __init__(self):
        self.az = Analyzer()

    def visit_AttrStmt(self, s):
        if s.attr_key == "thread_extent":
            self.az.bind(s.node.var, tvm.ir.Range.from_min_extent(0, s.value),
                         allow_override=True)
        return self.generic(s)

    def visit_For(self, s):
        known = s.kind == tirx.ForKind.SERIAL and not isinstance(s.extent, tirx.IntImm) and \
            self.az.can_prove(s.extent >= 1)
        self.az.bind(s.loop_var, tvm.ir.Range.from_min_extent(s.min, s.extent),
                     allow_override=True)
        loop = self.generic(s)
        return seq([assume_trip_count(s.extent), loop]) if known else loop


@function_pass("tl.AssumeTripCounts")
def AssumeTripCounts(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    return func.with_body(_Loops()(func.body))
