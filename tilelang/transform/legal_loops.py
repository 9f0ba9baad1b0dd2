"""``LegalizeLoops``: unrolled and vectorized loops in the forms TVM's ``UnrollLoop`` and
``VectorizeLoop`` handle correctly, run just before them.

* A loop of either kind with a step other than 1 becomes the same kind of loop over its trip
  count, the index rebuilt as ``min + k * step``: both TVM passes ignore ``For.step``, so
  ``T.vectorized(0, 16, step=4)`` ran every index from 0 to 15 (a silent wrong answer on every
  target).
* On CUDA, a vectorized loop wider than one 16-byte access of its widest element (4 lanes of a
  float8 or narrower type, which TVM's CUDA printer has no wider vectors of) is split into an
  unrolled loop over vectorized loops of the widest lane count that divides its extent;
  ``T.vectorized(128)`` over float32 asked TVM for a ``float32x128``, which it cannot print.
* On CUDA, a vectorized loop that computes on float8 (or narrower float) values, other than
  converting them, runs unrolled: TVM prints such vector arithmetic lane by lane through
  ``.x``/``.y`` members that CUDA's ``__nv_fp8x4_*`` types do not have (nvcc rejects it).  So
  does one converting, loading or storing a type the GPU lacks (float8 before sm_89): TVM's
  emulation of a vector conversion branches on a vector (``if (uint2)``, which nvcc rejects).
* A loop whose constant trip count is 0, and the branch of an ``if`` whose condition is a constant
  that rules it out (a pipeline prologue for no iterations), are removed: that code never runs,
  and TVM's later passes fail on the zero-size dimensions it may index (a GEMM with K = 0).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..engine.target import is_cpu
from ..ir_utils import StmtMutator, substitute
from ..ops.loops import max_lanes
from ..utils.dtype import is_narrow_float
from .passes import function_pass, target_of

VECTOR_BYTES = 16  # the widest single load or store of a CUDA thread


def _non_unit(step) -> bool:
    return step is not None and not (isinstance(step, tirx.IntImm) and step.value == 1)


_ARITH_NODES = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.FloorDiv, tirx.FloorMod, tirx.Min,
                tirx.Max, tirx.Select, tirx.Call)


def _computes_on_narrow_floats(body) -> bool:
    """Whether an expression of the loop body other than a load or a conversion yields a
    float8 (or narrower float) value."""
    found = []

    def on_expr(node):
        if isinstance(node.ty, tvm.ir.PrimType) and is_narrow_float(node.ty.dtype):
            found.append(node)

    tvm_ffi.structural_walk(body, [(t, on_expr) for t in _ARITH_NODES])
    return bool(found)


def _converts_emulated(body, target) -> bool:
    """Whether the loop body converts to or from, loads or stores a type TVM emulates for
    ``target`` (its legalization keeps kernel-local buffers of it in float32, and so converts
    at their loads and stores too)."""
    from ..device.casts import native_type

    found = []

    def emulated(dtype) -> bool:
        return not native_type(str(tvm.DataType(str(dtype)).with_lanes(1)), target)

    def on_cast(node):
        if any(isinstance(t, tvm.ir.PrimType) and emulated(t.dtype)
               for t in (node.ty, node.value.ty)):
            found.append(node)

    def on_access(node):
        buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
        if emulated(buf.dtype):
            found.append(node)

    tvm_ffi.structural_walk(body, [(tirx.Cast, on_cast), (tvm.ir.TensorLoad, on_access),
                                   (tirx.BufferStore, on_access)])
    return bool(found)


def _vector_lanes(body) -> int:
    """The most lanes one vector access of every buffer the loop body loads or stores moves."""
    lanes = [VECTOR_BYTES]

    def on_access(node):
        buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
        lanes.append(max_lanes(buf.dtype, VECTOR_BYTES))

    tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, on_access),
                                   (tirx.BufferStore, on_access)])
    return min(lanes)


class _Legalize(StmtMutator):
    def __init__(self, target):
        self.target = target
        self.cuda = not is_cpu(target)

    def visit_IfThenElse(self, s):
        if isinstance(s.condition, tirx.IntImm):  # a constant condition: the branch that runs
            taken = s.then_case if s.condition.value else s.else_case
            return self.visit(taken) if taken is not None else None
        return self.generic(s)

    def visit_For(self, s):
        if isinstance(s.extent, tirx.IntImm) and s.extent.value <= 0 and s.thread_binding is None:
            return None  # runs no iteration; its body may index zero-size dims TVM divides by
        out = self.generic(s)
        if out.kind not in (tirx.ForKind.UNROLLED, tirx.ForKind.VECTORIZED):
            return out
        if _non_unit(out.step):
            out = self._unit_step(out)
        if self.cuda and out.kind == tirx.ForKind.VECTORIZED:
            if _computes_on_narrow_floats(out.body) or \
                    _converts_emulated(out.body, self.target):
                return tirx.For(out.loop_var, out.min, out.extent, tirx.ForKind.UNROLLED,
                                out.body, out.thread_binding, out.annotations, span=out.span)
            out = self._split_wide(out)
        return out

    @staticmethod
    def _unit_step(loop):
        step = loop.step
        k = tirx.Var(loop.loop_var.name + "_k", loop.loop_var.dtype)
        trips = tirx.floordiv(loop.extent + step - 1, step)
        body = substitute(loop.body, {loop.loop_var: loop.min + k * step})
        return tirx.For(k, tirx.const(0, k.dtype), trips, loop.kind, body,
                        loop.thread_binding, loop.annotations, None, span=loop.span)

    @staticmethod
    def _split_wide(loop):
        if not isinstance(loop.extent, tirx.IntImm):
            return loop
        extent = loop.extent.value
        lanes = _vector_lanes(loop.body)
        if extent <= lanes:
            return loop
        while extent % lanes:
            lanes //= 2
        v = loop.loop_var
        outer = tirx.Var(v.name + "_o", v.dtype)
        inner = tirx.Var(v.name + "_v", v.dtype)
        body = substitute(loop.body, {v: loop.min + outer * lanes + inner})
        kind = tirx.ForKind.VECTORIZED if lanes > 1 else tirx.ForKind.UNROLLED
        inner_loop = tirx.For(inner, tirx.const(0, v.dtype), tirx.const(lanes, v.dtype), kind,
                              body, None, loop.annotations, span=loop.span)
        return tirx.For(outer, tirx.const(0, v.dtype), tirx.const(extent // lanes, v.dtype),
                        tirx.ForKind.UNROLLED, inner_loop, span=loop.span)


@function_pass("tl.LegalizeLoops")
def LegalizeLoops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Unit steps for unrolled/vectorized loops; on CUDA, vector loops at most 16 bytes wide
    and none computing on float8 values."""
    return func.with_body(_Legalize(target_of(func))(func.body))


__all__ = ["LegalizeLoops", "VECTOR_BYTES"]
