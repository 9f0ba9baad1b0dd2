"""Vectorized casts on CUDA: element-type conversions of 2, 4, ... lanes run as paired
conversions (``__float22half2_rn``, ``__nv_cvt_float2_to_fp8x2``, ...; the table is
``tilelang.device.casts``), two lanes per instruction, instead of one scalar cast per lane.

``VectorizeCastLoops`` (after ``LowerParallelLoops``): a ``T.Parallel`` loop partitioned over
registers (``for r in T.unroll(R)``) whose body is one store that converts element types with a
paired conversion, and whose every access is contiguous in ``r`` (or does not depend on it),
runs as ``for ro in T.unroll(R // v): for rv in T.vectorized(v)``, with ``v`` 4 or 2: the
widest that divides ``R`` and keeps each access aligned to ``v`` elements.

``LowerVectorCasts`` (after TVM's ``VectorizeLoop``/``UnrollLoop``): each cast of a vector of
``2k`` lanes with a paired conversion, in the value of a store and not under a condition,
becomes ``k`` ``tl.device.convert_pair`` calls.  They read register pairs (a register operand
is read in place; any other operand is first evaluated into a register array by one vector
access, so memory keeps its wide loads) and write register pairs (the store's own registers
when it stores the cast into registers; else a register array that replaces the cast).
The values are those of the scalar casts (see ``tilelang.device.casts``).  CPU: unchanged.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import Range
from tvm.sym import Analyzer

from ..device.casts import convert_pair, pair_conversion
from ..engine.target import is_cpu
from ..ir_utils import StmtMutator, find_all, map_nodes, seq, substitute, uses_var
from .lower_parallel_loops import PARTITIONED
from .passes import function_pass, target_of

LOAD = tvm.ir.TensorLoad  # what ``tirx.BufferLoad(...)`` builds
CAST = tvm.ir.prim.expr.Cast
WIDTHS = (4, 2)  # lanes a cast loop is vectorized to, widest first (4 = two pairs)
LOCAL = "local"


def _dtype(e) -> tvm.DataType:
    return tvm.DataType(str(e.ty))


def _element(dtype) -> str:
    return str(tvm.DataType(str(dtype)).with_lanes(1))


def _pairs(src_dtype, dst_dtype, target) -> bool:
    return pair_conversion(_element(src_dtype), _element(dst_dtype), target) is not None


def _paired_casts(expr, target) -> list:
    return find_all(expr, CAST, lambda c: _pairs(c.value.ty, c.ty, target))


# VectorizeCastLoops -----------------------------------------------------------------------
def _accesses(store: tirx.BufferStore) -> list[tuple]:
    """(buffer, indices, is the store) of every memory access of ``store``."""
    loads = find_all(store.value, LOAD)
    return [(store.buffer, list(store.indices), True)] + \
        [(ld.source, list(ld.indices), False) for ld in loads]


def _vector_ok(buf, indices, is_store: bool, r, extent: int, v: int) -> bool:
    """Whether the access at ``indices`` (a function of the register ``r``) is, for
    ``r = ro * v + rv``, ``v`` contiguous elements starting at a multiple of ``v`` (or, for a
    load, the same element for every ``rv``)."""
    if str(buf.dtype) == "bool":
        return False
    if not any(uses_var(e, r) for e in indices):
        return not is_store
    ro, rv = tirx.Var("ro", str(r.ty)), tirx.Var("rv", str(r.ty))
    a = Analyzer()
    a.bind(ro, Range.from_min_extent(tirx.const(0, str(r.ty)), extent // v))
    a.bind(rv, Range.from_min_extent(tirx.const(0, str(r.ty)), v))
    first = [substitute(e, {r: ro * v}) for e in indices]
    at = [substitute(e, {r: ro * v + rv}) for e in indices]
    *outer, last_at = at
    if not all(a.can_prove(e1 == e0) for e0, e1 in zip(first, outer)):
        return False  # v lanes along the last dim only
    if not a.can_prove(last_at - first[-1] == rv):
        return False
    last = first[-1]
    if not a.can_prove(tirx.floormod(last, v) == 0):
        return False
    if len(indices) > 1:
        row = buf.shape[-1]
        if not (isinstance(row, tirx.IntImm) and int(row) % v == 0):
            return False
    return True


def vector_width(loop: tirx.For, target) -> int:
    """The lanes (4 or 2) a register loop converting element types runs vectorized with on
    ``target``, or 1 when it stays unrolled."""
    body = loop.body
    if not isinstance(body, tirx.BufferStore) or not isinstance(loop.extent, tirx.IntImm):
        return 1
    if not _paired_casts(body.value, target):
        return 1
    extent = int(loop.extent)
    r = loop.loop_var
    for v in WIDTHS:
        if extent % v == 0 and all(_vector_ok(b, idx, st, r, extent, v)
                                   for b, idx, st in _accesses(body)):
            return v
    return 1


class _VectorizeLoops(StmtMutator):
    def __init__(self, target):
        self.target = target

    def visit_For(self, s):
        out = self.generic(s)
        if out.kind != tirx.ForKind.UNROLLED or PARTITIONED not in out.annotations:
            return out
        v = vector_width(out, self.target)
        if v == 1:
            return out
        r = out.loop_var
        ro, rv = tirx.Var("ro", str(r.ty)), tirx.Var("rv", str(r.ty))
        body = substitute(out.body, {r: ro * v + rv})
        inner = tirx.For(rv, tirx.const(0, str(r.ty)), v, tirx.ForKind.VECTORIZED, body)
        return tirx.For(ro, tirx.const(0, str(r.ty)), int(out.extent) // v,
                        tirx.ForKind.UNROLLED, inner, out.thread_binding, out.annotations,
                        span=s.span)


@function_pass("tl.VectorizeCastLoops")
def VectorizeCastLoops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """CUDA: register loops of a ``T.Parallel`` cast run vectorized (4 or 2 lanes)."""
    target = target_of(func)
    if is_cpu(target):
        return func
    return func.with_body(_VectorizeLoops(target)(func.body))


# LowerVectorCasts -------------------------------------------------------------------------
def _guarded(expr) -> bool:
    """Whether ``expr`` evaluates part of itself only under a condition (a select) or binds
    a variable (a let): its casts stay where they are."""
    return bool(find_all(expr, (tirx.Select, tirx.Let)) or find_all(
        expr, tvm.ir.Call, lambda c: isinstance(c.op, tvm.ir.Op) and
        c.op.name == "prim.if_then_else"))


def _lowerable(c, target) -> bool:
    lanes = _dtype(c).lanes
    return lanes >= 2 and lanes % 2 == 0 and _pairs(c.value.ty, c.ty, target) and \
        not isinstance(c.value, tirx.Broadcast)


def _is_unit_ramp(i) -> bool:
    return isinstance(i, tirx.Ramp) and isinstance(i.stride, tirx.IntImm) and \
        int(i.stride) == 1


def _registers_at(buf, indices) -> bool:
    """``buf[indices]`` are consecutive registers (``local[base : base + lanes]``)."""
    return buf.scope() == LOCAL and len(indices) == 1 and _is_unit_ramp(indices[0])


def _ramp(base, lanes: int):
    return tirx.Ramp(base, tirx.const(1, str(base.ty)), lanes)


def _zero_ramp(lanes: int):
    return _ramp(tirx.const(0, "int32"), lanes)


def lower_cast(c, head: list, dst=None, dst_base=None):
    """Append to ``head`` the statements converting the vector cast ``c`` pair by pair into
    ``dst[dst_base:]`` (registers), or into a new register array when ``dst`` is ``None``;
    returns the load of that new array (``None`` when ``dst`` is given)."""
    lanes = _dtype(c).lanes
    src = c.value
    if not (isinstance(src, LOAD) and _registers_at(src.source, src.indices)):
        staged = tirx.decl_buffer((lanes,), _element(src.ty), "cast_in", scope=LOCAL)
        head += [tirx.AllocBuffer(staged), tirx.BufferStore(staged, src, [_zero_ramp(lanes)])]
        src = tirx.BufferLoad(staged, [_zero_ramp(lanes)])
    out = None
    if dst is None:
        dst = tirx.decl_buffer((lanes,), _element(c.ty), "cast_out", scope=LOCAL)
        dst_base = tirx.const(0, "int32")
        head.append(tirx.AllocBuffer(dst))
        out = tirx.BufferLoad(dst, [_zero_ramp(lanes)])
    base = src.indices[0].base
    for k in range(lanes // 2):
        pair = tirx.BufferLoad(src.source, [_ramp(base + 2 * k, 2)])
        head.append(tirx.Evaluate(convert_pair(tirx.BufferLoad(dst, [dst_base + 2 * k]), pair)))
    return out


class _LowerCasts(StmtMutator):
    def __init__(self, target):
        self.target = target

    def visit_BufferStore(self, st):
        target = self.target
        if not any(_lowerable(c, target) for c in _paired_casts(st.value, target)) or \
                _guarded(st.value):
            return st
        head: list = []

        def on_cast(c):
            return lower_cast(c, head) if _lowerable(c, target) else c

        top = st.value
        if isinstance(top, CAST) and _lowerable(top, target) and \
                _registers_at(st.buffer, st.indices):
            # the cast's pairs land in the store's own registers
            inner = map_nodes(top.value, (CAST, on_cast))
            lower_cast(tirx.Cast(str(top.ty), inner), head, st.buffer, st.indices[0].base)
            return seq(head)
        value = map_nodes(top, (CAST, on_cast))
        return seq(head + [tirx.BufferStore(st.buffer, value, st.indices)])


@function_pass("tl.LowerVectorCasts")
def LowerVectorCasts(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """CUDA: vector casts with a paired conversion convert two lanes per instruction."""
    target = target_of(func)
    if is_cpu(target):
        return func
    return func.with_body(_LowerCasts(target)(func.body))


__all__ = ["LowerVectorCasts", "VectorizeCastLoops", "lower_cast", "vector_width"]
