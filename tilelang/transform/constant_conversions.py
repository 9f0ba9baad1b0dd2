"""``FoldConstantConversions``: a float -> integer conversion whose value became a constant
(after unrolling, or in a loop of one iteration) is folded as the GPU converts
(``cpu_math.gpu_float_to_int``: toward 0, clamped, NaN 0).  TVM's simplifier folds it with a
range check that fails on a value the integer type cannot hold ("Literal value ... exceeds
range"); this pass runs before each simplifier."""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from ..ir_utils import map_nodes
from .cpu_math import gpu_float_to_int
from .passes import function_pass

_NUMPY = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def _fold(cast, analyzer):
    dst, src = str(cast.ty.dtype), str(cast.value.ty.dtype)
    if not dst.startswith(("int", "uint")) or src not in _NUMPY or isinstance(cast.value, tirx.Var):
        return cast
    value = analyzer.simplify(cast.value)
    if not isinstance(value, tirx.FloatImm):
        return cast
    as_src = float(_NUMPY[src](value.value))  # TVM folds float arithmetic in double
    return tirx.const(gpu_float_to_int(as_src, src, dst), dst)


@function_pass("tl.FoldConstantConversions")
def FoldConstantConversions(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Fold each float -> integer conversion of a constant value as the GPU converts it."""
    analyzer = tvm.sym.Analyzer()

    def bind_single_iteration(loop):  # the simplifier substitutes these loops' variables
        if isinstance(loop.extent, tirx.IntImm) and loop.extent.value == 1:
            analyzer.bind(loop.loop_var, loop.min)

    tvm_ffi.structural_walk(func.body, (tirx.For, bind_single_iteration), order="pre")
    body = map_nodes(func.body, [(tirx.Cast, lambda c: _fold(c, analyzer))])
    return func if body.same_as(func.body) else func.with_body(body)


__all__ = ["FoldConstantConversions"]
