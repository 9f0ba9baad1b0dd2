"""The schedule of a ``T.Pipelined`` loop: which statement of the body runs at which stage and
in which order inside an iteration.

A statement of stage 0 is a *producer*: it is issued ``num_stages - 1`` iterations ahead of
the statements of later stages (the *consumers*), which run on the data of their own
iteration.  ``order`` is the position of each statement inside an iteration.  Without
annotations, the pipelinable producers (``is_producer``) get stage 0, everything else stage 1,
and the producers come first.  The schedule says nothing about how the stages are made safe:
that is the protocol's job (``pipeline_protocol``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from tvm import tirx

from ..errors import LoweringError, source_location


@dataclass(frozen=True)
class Schedule:
    """``stage[i]`` and position ``order.index(i)`` of statement ``i`` of the loop body."""

    num_stages: int
    stage: tuple[int, ...]
    order: tuple[int, ...]  # statement indices, in issue order within an iteration

    def is_producer(self, i: int) -> bool:
        return self.stage[i] == 0 and max(self.stage) > 0

    @property
    def producers(self) -> list[int]:
        return [i for i in self.order if self.is_producer(i)]

    @property
    def last_producer_position(self) -> int:
        return max(p for p, i in enumerate(self.order) if self.is_producer(i))

    def without_producer(self, i: int) -> "Schedule":
        """The schedule with statement ``i`` moved to the consumers' stage."""
        stage = list(self.stage)
        stage[i] = max(1, max(stage))
        return Schedule(self.num_stages, tuple(stage), self.order)


def _where(loop: tirx.For, stmts: Sequence) -> str:
    for node in [loop] + list(stmts):
        w = source_location(getattr(node, "span", None))
        if w is None and isinstance(node, tirx.Evaluate):
            w = source_location(getattr(node.value, "span", None))
        if w:
            return f"\n  {w}"
    return ""


def plan(loop: tirx.For, stmts: Sequence, is_producer: Callable[[int], bool],
         reads: Callable[[int], set], writes: Callable[[int], set]) -> Schedule:
    """The schedule of ``loop`` (body ``stmts``) from its ``T.Pipelined`` annotations.

    ``reads(i)``/``writes(i)``: the shared tiles statement ``i`` reads / writes.  Raises
    ``LoweringError`` naming the loop's line when ``order`` or ``stage`` has the wrong length,
    ``order`` is not a permutation, a stage is outside ``[0, num_stages)`` or a statement reads
    a tile before the stage that produces it."""
    n = int(loop.annotations.get("num_stages", 0))
    count = len(stmts)
    where = _where(loop, stmts)
    stage_ann = loop.annotations.get("tl_pipeline_stage")
    order_ann = loop.annotations.get("tl_pipeline_order")
    for what, ann in (("stage", stage_ann), ("order", order_ann)):
        if ann is not None and len(ann) != count:
            raise LoweringError(f"T.Pipelined: {what}={[int(x) for x in ann]} has {len(ann)} "
                                f"entries, but the loop body has {count} statements{where}")
    if order_ann is not None:
        order_list = [int(x) for x in order_ann]
        if sorted(order_list) != list(range(count)):
            raise LoweringError(f"T.Pipelined: order={order_list} is not a permutation of "
                                f"0..{count - 1}{where}")
        order = tuple(sorted(range(count), key=lambda i: order_list[i]))
    else:
        order = None
    if stage_ann is not None:
        stage = tuple(int(x) for x in stage_ann)
        bad = [s for s in stage if not 0 <= s < max(n, 1)]
        if bad:
            raise LoweringError(f"T.Pipelined: stage={list(stage)} has stage {bad[0]}, outside "
                                f"0..{max(n, 1) - 1} for num_stages={n}{where}")
        for i in range(count):
            for j in range(count):
                if i != j and stage[j] < stage[i] and writes(i) & reads(j):
                    raise LoweringError(
                        f"T.Pipelined: statement {j} (stage {stage[j]}) reads a tile that "
                        f"statement {i} produces at the later stage {stage[i]}{where}")
    else:
        stage = tuple(0 if is_producer(i) else 1 for i in range(count))
    if order is None:
        prod = [i for i in range(count) if stage[i] == 0 and max(stage) > 0]
        order = tuple(prod + [i for i in range(count) if i not in prod])
    return Schedule(n, stage, order)
