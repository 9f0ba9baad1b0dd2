"""``InjectSoftwarePipeline``: multi-stage buffering of ``T.Pipelined`` loops.

CPU: a pipelined loop is a plain sequential loop (its schedule annotations are dropped).
"""

from __future__ import annotations

from tvm import tirx

from ..engine.target import is_cpu
from ..language.loop import PIPELINE_KEYS
from .ir import StmtMutator
from .passes import function_pass, target_of

_KEYS = set(PIPELINE_KEYS.values())


class _Strip(StmtMutator):
    def visit_For(self, s):
        ann = {k: v for k, v in s.annotations.items() if k not in _KEYS}
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, self(s.body), s.thread_binding,
                        ann, s.step)


@function_pass("tl.InjectSoftwarePipeline")
def InjectSoftwarePipeline(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func.with_body(_Strip()(func.body))
    return func
