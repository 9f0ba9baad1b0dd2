"""Two-lane folds of 16-bit floats (CUDA): ``tl.device.fold_pair(fn, address_of(acc), x)``
combines the two lanes of ``x`` (``float16x2`` / ``bfloat16x2``) into the two lanes of the
register accumulator ``acc`` with one paired instruction: ``add2`` (``__hadd2``), ``max2`` /
``min2`` (``__hmax2`` / ``__hmin2``: a NaN lane operand is ignored, like ``fmax``), their
NaN-propagating ``max2_nan`` / ``min2_nan``, and the ``abs_`` forms, which fold ``|x|``.

The accumulator is passed by address because TVM prints a call returning a vector as one
call per lane; the header side is ``tl::add2(half2* acc, half2 x)`` and its kin in
``src/tl_templates/cuda/reduce.h``.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from .effects import Access, Effect, Memory, call, register_device_op

FOLDS = ("add2", "max2", "min2", "max2_nan", "min2_nan")
PAIR_TYPES = ("float16x2", "bfloat16x2")


def _emit(c: tvm.ir.Call) -> tvm.ir.PrimExpr:
    fn, acc, x = c.args
    return tirx.call_extern("void", f"tl::{fn.value}", acc, x)


FOLD_PAIR = register_device_op(
    "tl.device.fold_pair",
    Effect(accesses=(Access((1,), Memory.REGISTER), Access((1,), Memory.REGISTER, write=True))),
    _emit,
    "acc = fn(acc, x) on both lanes of a 16-bit float pair (one paired instruction)")


def fold_pair(fn: str, acc_element: tvm.ir.PrimExpr, x: tvm.ir.PrimExpr,
              absolute: bool = False) -> tvm.ir.Call:
    """``acc_element = fn(acc_element, |x| if absolute else x)`` lane by lane, where
    ``acc_element`` is an element (a ``BufferLoad``) of a register buffer of a pair type and
    ``x`` a value of the same type; ``fn`` is one of :data:`FOLDS`."""
    ty = str(x.ty)
    if fn not in FOLDS or ty not in PAIR_TYPES or acc_element.source.dtype != ty:
        raise ValueError(f"fold_pair: no paired {fn} of {ty} into a {acc_element.source.dtype} "
                         f"accumulator")
    name = ("abs_" if absolute else "") + fn
    return call(FOLD_PAIR, name, tirx.address_of(acc_element), x, dtype="int32")


__all__ = ["FOLDS", "FOLD_PAIR", "PAIR_TYPES", "fold_pair"]
