"""Loop kinds of the tile language.

``T.Parallel(M, N)`` is element-wise work over a tile: iterations are independent and the
target maps them onto the block's threads (CPU: runs them in order).  ``T.Pipelined`` is a
sequential loop whose copies of later iterations may overlap the compute of the current one;
its schedule arguments are kept as loop annotations for the pipelining pass.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from tvm import tirx
from tvm.sym import Analyzer
from tvm.script import tirx as _T

from ..errors import DSLError

# Loop variables of multi-dimensional ``T.Parallel`` loops.  TVMScript builds one ``T.grid``
# frame for ``for i, j in ...``; ``prim_func`` turns those loops into parallel ones after
# parsing (see ``mark_parallel_loops``).
_pending_parallel: dict[int, Any] = {}

PIPELINE_KEYS = {
    "num_stages": "num_stages",
    "order": "tl_pipeline_order",
    "stage": "tl_pipeline_stage",
    "sync": "tl_pipeline_sync",
    "group": "tl_pipeline_group",
}


def _integers(op: str, *values: Any) -> None:
    """A loop bound or step must be an integer: ``T.serial(2.5)`` ran 2 iterations."""
    for v in values:
        if isinstance(v, float) or (isinstance(v, tirx.PrimExpr) and
                                    not str(v.ty).startswith(("int", "uint"))):
            raise DSLError(f"{op}: {v!r} is not an integer (loop bounds and steps are)")


def Parallel(*extents: Any, coalesced_width: int | None = None, prefer_async: bool = False,
             annotations: dict | None = None, loop_layout: Any = None):
    """``for i, j in T.Parallel(M, N)``: element-wise loop nest over an ``M x N`` tile.
    ``prefer_async`` and ``annotations`` are scheduling hints (``tilelang.ops.hints``);
    ``loop_layout`` (a fixed thread mapping) is refused."""
    from ..ops.hints import check_hints, refuse

    if not extents:
        raise DSLError("T.Parallel needs at least one extent")
    _integers("T.Parallel", *extents)
    check_hints("T.Parallel", annotations, prefer_async)
    refuse("T.Parallel", "loop_layout", loop_layout,
           "layout inference maps loop iterations to threads")
    ann = {"tl.coalesced_width": coalesced_width} if coalesced_width else None
    if len(extents) == 1:
        return _T.parallel(0, extents[0], annotations=ann)
    frame = _T.grid(*extents)
    for v in frame.vars:
        _pending_parallel[v.__chandle__()] = (v, ann)
    return frame


def Pipelined(
    start: Any,
    stop: Any = None,
    num_stages: int = 0,
    order: Sequence[int] | None = None,
    stage: Sequence[int] | None = None,
    sync: Sequence[Sequence[int]] | None = None,
    group: Sequence[Sequence[int]] | None = None,
):
    """``for k in T.Pipelined(n, num_stages=3)``: a software-pipelined loop over ``[0, n)``
    (or ``[start, stop)``).  ``order``/``stage`` give a manual schedule, one entry per
    statement of the body; given per statement group (``group``), they are not followed."""
    if stop is None:
        start, stop = 0, start
    _integers("T.Pipelined", start, stop)
    if int(num_stages) < 0:
        raise DSLError(f"T.Pipelined: num_stages must be >= 0, got {num_stages}")
    ann: dict[str, Any] = {"num_stages": int(num_stages)}
    if group is not None and (order is not None or stage is not None):
        # the public TileLang's stages of statement groups schedule compute across iterations,
        # which this pipeline's stages (0: the producers issued ahead) do not mean: the
        # automatic schedule, which overlaps the same work, is used instead
        logging.getLogger("tilelang").debug(
            "T.Pipelined: order/stage over statement groups (group=%s) not followed; the "
            "automatic schedule is used", group)
        order = stage = None
    for arg, val in (("order", order), ("stage", stage), ("sync", sync), ("group", group)):
        if val is not None:
            ann[PIPELINE_KEYS[arg]] = _to_ints(val)
    return _T.serial(start, stop, annotations=ann)


def serial(start: Any, stop: Any = None, step: Any = None, *, annotations: dict | None = None,
           unroll: bool | int | None = None, dtype: str | None = None):
    """``for i in T.serial(start, stop, step)``: a sequential loop; the step may be given in
    place, as in the public TileLang (TVMScript takes it by keyword only)."""
    _integers("T.serial", start, stop, step)
    return _T.serial(start, stop, step=step, annotations=annotations, unroll=unroll, dtype=dtype)


def vectorized(start: Any, stop: Any = None, step: Any = None, *,
               annotations: dict | None = None, dtype: str | None = None):
    """``for i in T.vectorized(start, stop, step)``: a loop whose iterations become vector
    lanes (the step in place too, as in :func:`serial`)."""
    _integers("T.vectorized", start, stop, step)
    return _T.vectorized(start, stop, step=step, annotations=annotations, dtype=dtype)


def unroll(start: Any, stop: Any = None, step: Any = None, *, unroll_factor: int | None = None,
           annotations: dict | None = None):
    """``for i in T.unroll(n)``: a loop the compiler unrolls.  With a constant trip count, unit
    step and no ``unroll_factor`` it is unrolled in the IR (TVMScript's ``T.unroll``);
    otherwise it stays a loop that CUDA unrolls by ``#pragma unroll`` (``unroll_factor``
    iterations at a time): unrolling is a hint, a trip count known only at run time cannot be
    unrolled ahead, and TVM's IR unroller ignores a step (it would run every index)."""
    if stop is None:
        start, stop = 0, start
    _integers("T.unroll", start, stop, step)
    extent = Analyzer().simplify(tirx.const(0) + stop - start)
    unit_step = step is None or (isinstance(step, (int, tirx.IntImm)) and int(step) == 1)
    if unroll_factor is None and unit_step and isinstance(extent, tirx.IntImm):
        return _T.unroll(start, stop, step=step, annotations=annotations)
    if unroll_factor is not None and int(unroll_factor) < 1:
        raise DSLError(f"T.unroll: unroll_factor must be >= 1, got {unroll_factor}")
    return _T.serial(start, stop, step=step, annotations=annotations,
                     unroll=int(unroll_factor) if unroll_factor is not None else True)


def _to_ints(v):
    if isinstance(v, (list, tuple)):
        return [_to_ints(x) for x in v]
    return int(v)


# Loop variables of ``T.Persistent`` loops: the first walks the waves, the others (extent 1)
# stand for the tile coordinates until ``mark_parallel_loops`` binds them.
_pending_persistent: dict[int, Any] = {}


def Persistent(domain: Sequence[Any], wave_size: Any, index: Any, group_size: int = 8):
    """``for i, j in T.Persistent([M, N], wave_size, index)``: the tiles of the ``M x N`` grid
    that the persistent block ``index`` of ``wave_size`` blocks processes: tiles ``index``,
    ``index + wave_size``, ... of the grouped order (:func:`grouped_tile`), one per
    iteration, so that the ``wave_size`` blocks together visit every tile exactly once and
    the blocks of one wave share operand panels in L2."""
    domain = list(domain) if isinstance(domain, (list, tuple)) else [domain]
    if not domain:
        raise DSLError("T.Persistent needs at least one extent in its domain")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise DSLError(f"T.Persistent: group_size must be a positive int, got {group_size!r}")
    total = tirx.const(1, "int32")
    for d in domain:
        total = total * d
    waves = Analyzer().simplify(tirx.floordiv(total + wave_size - 1, wave_size))
    frame = _T.grid(waves, *([1] * (len(domain) - 1)))
    vars_ = list(frame.vars)
    _pending_persistent[vars_[0].__chandle__()] = (vars_, domain, total, wave_size, index,
                                                   group_size)
    return frame


def grouped_tile(tile: Any, domain: Sequence[Any], group_size: int) -> list:
    """The coordinates of the ``tile``-th tile of ``domain`` in grouped order: the last axis
    is cut into groups of ``group_size`` columns (the last group may be narrower), the groups
    are visited in turn, and inside a group the columns vary fastest, then the leading axes
    in row-major order.  Consecutive tiles thus share a row (an A panel of a GEMM) and a
    wave of blocks stays within a few column panels (of B)."""
    from ..ops.loops import unflatten

    *lead, cols = list(domain)
    if not lead:
        return [tile]
    rows = tirx.const(1, "int32")
    for e in lead:
        rows = rows * e
    width = tirx.min(tirx.const(group_size, "int32"), cols)
    per_group = rows * width
    first_col = tirx.floordiv(tile, per_group) * width
    in_group = tile - first_col * rows
    group_width = tirx.min(width, cols - first_col)
    return [*unflatten(tirx.floordiv(in_group, group_width), lead),
            first_col + tirx.floormod(in_group, group_width)]


def mark_parallel_loops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Give the loops created by multi-dimensional ``T.Parallel`` the parallel kind, and make
    each ``T.Persistent`` loop a serial loop over its waves whose body, guarded by the tile
    being in the grid, sees the tile's coordinates."""
    if not _pending_parallel and not _pending_persistent:
        return func
    from ..ir_utils import StmtMutator, substitute
    from ..ops.loops import unflatten

    pending = dict(_pending_parallel)
    persistent = dict(_pending_persistent)

    class _Mark(StmtMutator):
        def visit_For(self, s):
            spec = persistent.get(s.loop_var.__chandle__())
            if spec is not None:
                return self._persistent(s, *spec)
            body = self(s.body)
            hit = pending.get(s.loop_var.__chandle__())
            if hit is None:
                return tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding,
                                s.annotations, s.step, span=s.span)
            ann = dict(s.annotations)
            if hit[1]:
                ann.update(hit[1])
            return tirx.For(s.loop_var, s.min, s.extent, tirx.ForKind.PARALLEL, body, None,
                            ann, s.step, span=s.span)

        def _persistent(self, s, vars_, domain, total, wave_size, index, group_size):
            body = s
            for _ in vars_:  # the grid's loops, the coordinate ones of extent 1
                body = body.body
            body = self(body)
            wave = s.loop_var
            tile = wave * wave_size + index
            body = substitute(body, dict(zip(vars_, grouped_tile(tile, domain, group_size))))
            guarded = tirx.IfThenElse(tile < total, body, None)
            return tirx.For(wave, s.min, s.extent, tirx.ForKind.SERIAL, guarded, None,
                            s.annotations, s.step, span=s.span)

    func = func.with_body(_Mark()(func.body))
    return func


def python_steps(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Loops with a constant negative step run as Python's ``range`` does: ``range(7, -1, -1)``
    visits 7, 6, ..., 0.  TVM's loop runs while ``i < min + extent``, so such a loop (extent
    ``stop - start`` below zero) ran no iteration; it becomes a loop over its trip count
    ``max(0, ceil((start - stop) / -step))`` with the index ``start + k * step``.  A step of 0
    raises :class:`DSLError` (as ``range`` does), where the loop would never end.  A
    ``T.vectorized`` loop of a run-time extent, which no target can vectorize, runs serially."""
    from ..errors import source_location
    from ..ir_utils import StmtMutator, substitute

    class _Steps(StmtMutator):
        def visit_For(self, s):
            body = self(s.body)
            step = s.step
            if isinstance(step, tirx.IntImm) and step.value == 0:
                where = source_location(s.span)
                raise DSLError(f"loop over {s.loop_var.name}: the step must not be 0"
                               + (f"\n  {where}" if where else ""))
            kind = s.kind
            if kind == tirx.ForKind.VECTORIZED and not isinstance(s.extent, tirx.IntImm):
                logging.getLogger("tilelang").debug(
                    "T.vectorized loop over %s: its extent %s is known only at run time; "
                    "it runs serially", s.loop_var.name, s.extent)
                kind = tirx.ForKind.SERIAL
            if not (isinstance(step, tirx.IntImm) and step.value < 0):
                return tirx.For(s.loop_var, s.min, s.extent, kind, body, s.thread_binding,
                                s.annotations, s.step, span=s.span)
            ty = str(s.loop_var.ty)
            down = tirx.const(-step.value, ty)
            trips = Analyzer().simplify(tirx.max(tirx.floordiv(-s.extent + down - 1, down),
                                                 tirx.const(0, ty)))
            k = tirx.Var(s.loop_var.name, ty)
            body = substitute(body, {s.loop_var: s.min + k * tirx.const(step.value, ty)})
            return tirx.For(k, tirx.const(0, ty), trips, kind, body, s.thread_binding,
                            s.annotations, span=s.span)

    body = _Steps()(func.body)
    return func if body.same_as(func.body) else func.with_body(body)


def check_parallel_jumps(func: tirx.PrimFunc) -> None:
    """Raise :class:`DSLError` for a ``break`` or ``continue`` that would leave a
    ``T.Parallel`` loop: its iterations are independent (on the GPU, spread over threads), so
    there is no later iteration to skip.  Jumps of a sequential loop inside it are fine."""
    import tvm

    from ..errors import source_location

    jumps = {tvm.ir.Op.get("tirx.break_loop"): "break", tvm.ir.Op.get("tirx.continue_loop"):
             "continue"}
    found: list = []

    def walk(s, in_parallel: bool):
        if found or s is None:
            return
        if isinstance(s, tirx.For):
            walk(s.body, s.kind == tirx.ForKind.PARALLEL)
        elif isinstance(s, tirx.While):
            walk(s.body, False)
        elif isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                walk(x, in_parallel)
        elif isinstance(s, tirx.IfThenElse):
            walk(s.then_case, in_parallel)
            walk(s.else_case, in_parallel)
        elif isinstance(s, tirx.Evaluate) and isinstance(s.value, tvm.ir.Call) and in_parallel:
            kind = next((k for op, k in jumps.items() if s.value.op.same_as(op)), None)
            if kind is not None:
                found.append((kind, s.span))
        elif hasattr(s, "body"):
            walk(s.body, in_parallel)

    walk(func.body, False)
    if found:
        kind, span = found[0]
        where = source_location(span)
        raise DSLError(f"T.Parallel: `{kind}` cannot leave a T.Parallel loop (its iterations "
                       "are independent and run at once on the GPU); guard the iteration's "
                       "body with an `if` instead" + (f"\n  {where}" if where else ""))


def clear_pending() -> None:
    _pending_parallel.clear()
    _pending_persistent.clear()
