"""``LowerTileOps``: replace every tile-operator call by its lowering for the function's target.

Expects: a PrimFunc with a ``target`` attribute whose tile operators are ``Evaluate(tl.*)``.
Guarantees: no ``tl.*`` tile-operator call remains; the loops that replace them are
``T.Parallel`` (parallel-kind) or serial loops over the operator's region.  A ``LoweringError``
of an op ends with the user's source line of that op.
"""

from __future__ import annotations

from tvm import tirx
from tvm.ir import Range
from tvm.sym import Analyzer

from ..device.thread_group import BarrierIds, ThreadGroup, group_of
from ..engine.target import family
from ..jit.effects import accessed_besides_copies, written_tensors
from ..language.pointer import kernel_addressed
from ..language.view import reshaped_layout, shared_view_layout, viewed_buffer
from ..layout import codec
from ..ops import LowerContext, decode
from . import pass_config
from ..ir_utils import StmtMutator
from .passes import at_source, function_pass, target_of


# Marks a copy that a pipelined loop issues ahead (cp.async where the copy allows it).
ASYNC_COPY = "tl.async_copy"
# Marks a copy that a pipelined loop issues as TMA loads completing on the mbarrier element
# that is the attribute's value.
TMA_PRODUCER = "tl.tma_producer"
# around a TMA producer of a warp-specialized pipeline: the cluster mask it multicasts to
TMA_MULTICAST = "tl.tma_multicast"


class _Lower(StmtMutator):
    def __init__(self, ctx: LowerContext):
        self.ctx = ctx

    def visit_For(self, s):
        self.ctx.analyzer.bind(s.loop_var, Range.from_min_extent(s.min, s.extent))
        if s.kind != tirx.ForKind.PARALLEL or self.ctx.in_parallel:
            return self.generic(s)
        self.ctx.in_parallel = True
        try:
            return self.generic(s)
        finally:
            self.ctx.in_parallel = False

    def visit_AllocBuffer(self, s):
        if "tl.layout" in s.annotations:
            self.ctx.layouts[s.buffer.__chandle__()] = codec.decode(s.annotations["tl.layout"])
        if "tl.swizzle" in s.annotations:
            self.ctx.swizzled.add(s.buffer.__chandle__())
        self.ctx.tile_annotations[s.buffer.__chandle__()] = dict(s.annotations)
        return s

    def visit_DeclBuffer(self, s):
        base = viewed_buffer(s)  # a view of a fragment is laid out by the fragment's layout
        lay = None if base is None else self.ctx.layout(base)
        if lay is not None:
            self.ctx.layouts[s.buffer.__chandle__()] = reshaped_layout(lay, base, s.buffer)
        elif base is not None and base.__chandle__() in self.ctx.tile_annotations:
            # a view of a shared tile is stored through the tile's layout (PlanSharedMemory)
            from .layout_inference import shared_layout_of

            tile = tirx.AllocBuffer(base, annotations=self.ctx.tile_annotations[
                base.__chandle__()])
            view_layout = shared_view_layout(shared_layout_of(tile), base, s.buffer)
            ann = {} if view_layout is None else {"tl.shared_layout": codec.encode(view_layout)}
            self.ctx.tile_annotations[s.buffer.__chandle__()] = ann
            if getattr(view_layout, "swizzled", False) and not view_layout.paneled:
                self.ctx.swizzled.add(s.buffer.__chandle__())  # the sm80 swizzle of the view
        return s

    def visit_AttrStmt(self, s):
        if s.attr_key == ASYNC_COPY:
            old, self.ctx.async_copy = self.ctx.async_copy, True
            out = self(s.body)
            self.ctx.async_copy = old
            return out
        if s.attr_key == TMA_MULTICAST:  # the node: the groups (rank masks) the loads go to
            old, self.ctx.tma_multicast = self.ctx.tma_multicast, tuple(int(m) for m in s.node)
            out = self(s.body)
            self.ctx.tma_multicast = old
            return out
        if s.attr_key == TMA_PRODUCER:  # the value: the barrier element the loads complete on
            old, self.ctx.tma_barrier = self.ctx.tma_barrier, s.value
            out = self(s.body)
            self.ctx.tma_barrier = old
            return out
        group = group_of(s)
        if group is not None:  # a T.ws region: its ops run on the group's threads
            old = self.ctx.group
            self.ctx.group = group
            try:
                return self.generic(s)
            finally:
                self.ctx.group = old
        if s.attr_key == "thread_extent":
            iv = s.node
            self.ctx.analyzer.bind(iv.var, Range.from_min_extent(0, s.value))
            if iv.thread_tag == "threadIdx.x":
                self.ctx.tx = iv.var
            if iv.thread_tag.startswith("threadIdx"):
                old, old_bars = self.ctx.group, self.ctx.barriers
                n = old.count * int(s.value) if isinstance(s.value, tirx.IntImm) else old.count
                self.ctx.group = ThreadGroup(0, n)  # the block: the largest group
                self.ctx.barriers = BarrierIds(self.ctx.group)
                try:
                    return self.generic(s)
                finally:
                    self.ctx.group, self.ctx.barriers = old, old_bars
        return self.generic(s)

    def visit_IfThenElse(self, s):
        with self.ctx.analyzer.constraint_scope(s.condition):
            then = self(s.then_case)
        els = None
        if s.else_case is not None:
            with self.ctx.analyzer.constraint_scope(tirx.Not(s.condition)):
                els = self(s.else_case)
        return tirx.IfThenElse(s.condition, then, els)

    def visit_Evaluate(self, s):
        op = decode(s)
        if op is None:
            return s
        with at_source(op.span or s.span):
            return op.lower(self.ctx)


@function_pass("tl.LowerTileOps")
def LowerTileOps(func: tirx.PrimFunc) -> tirx.PrimFunc:
    target = target_of(func)
    ctx = LowerContext(target=target, family=family(target), analyzer=Analyzer(),
                       config=pass_config.current(), kernel_addressed=kernel_addressed(func.body),
                       kernel_touched=accessed_besides_copies(func.body),
                       kernel_written=written_tensors(func.body))
    return func.with_body(_Lower(ctx)(func.body))
