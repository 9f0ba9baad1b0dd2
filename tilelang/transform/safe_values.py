"""``ApplySafeValues``: ``T.annotate_safe_value({A: v})`` reaches the copies it governs.

The annotation holds from its statement to the end of the statement list that contains it
(its lexical scope), nested lists included; a later annotation of the same tensor replaces it
for the rest of its own scope.  Each ``T.copy`` whose source is an annotated tensor records the
value (``Copy.oob_value``): its out-of-range elements read as that value, converted to the
destination's type, instead of 0.  Such a copy does not use TMA or ``cp.async``, which can
only fill with zeros.  The annotations themselves are removed.
"""

from __future__ import annotations

from tvm import tirx

from ..ir_utils import StmtMutator, seq
from ..ops import region as R
from ..ops.annotate import AnnotateSafeValue
from ..ops.base import decode
from ..ops.copy import Copy
from .passes import function_pass


class _Apply(StmtMutator):
    def __init__(self):
        self.scope: dict = {}  # source buffer handle -> safe value

    def visit_SeqStmt(self, s):
        outer = self.scope
        self.scope = dict(outer)
        out = []
        try:
            for x in s.seq:
                op = decode(x)
                if isinstance(op, AnnotateSafeValue):
                    self.scope[op.buffer.__chandle__()] = op.value
                    continue
                out.append(self.visit(x))
        finally:
            self.scope = outer
        return seq(out)

    def visit_Evaluate(self, s):
        op = decode(s)
        if isinstance(op, AnnotateSafeValue):
            return None  # the only statement of its scope: governs nothing
        if isinstance(op, Copy):
            value = self.scope.get(R.buffer_of(op.src).__chandle__())
            if value is not None:
                return tirx.Evaluate(op.replace(oob_value=value).to_call(), span=s.span)
        return s


@function_pass("tl.ApplySafeValues")
def ApplySafeValues(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return func.with_body(_Apply()(func.body))
