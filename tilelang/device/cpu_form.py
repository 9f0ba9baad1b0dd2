"""The CPU meaning of device ops written by the user: the CPU backend runs a whole block on one
thread, so an explicit-width load or store is an ordinary one (``memory_access``), ``__ffs`` is
bit arithmetic, and an op that needs the lanes of a warp or the threads of a block to run
together (votes, shuffles, warp reductions: ``warp``) has no meaning there and is rejected,
naming the op; so is any other device op left once the launch is lowered (a CUDA instruction:
``T.fence_proxy_async``), naming the op and the user's line. A comparison of two ``bool`` values
compares them as ``int8`` (TVM's LLVM code generator emits a float compare for ``bool``
operands, which LLVM rejects)."""

from __future__ import annotations

import tvm
from tvm import tirx

from ..errors import LoweringError, source_location
from ..ir_utils import find_all, map_nodes
from .effects import all_device_ops
from . import memory_access, warp


def lower(stmt: tirx.Stmt) -> tirx.Stmt:
    """``stmt`` with every explicit access and ``__ffs`` in plain TIR; a warp or block
    collective raises :class:`LoweringError`."""
    def on_call(c):
        if not isinstance(c.op, tvm.ir.Op):
            return c
        if warp.warp_only(c):
            raise LoweringError(
                f"{warp.USER_NAMES[c.op.name]} needs the threads of a warp (or block) to run "
                f"together, but the CPU backend runs each block on one thread; compile this "
                f"kernel for CUDA")
        if c.op.same_as(warp.FFS.op):
            return warp.ffs_cpu_form(c)
        if c.op.same_as(memory_access.LDG.op):
            return memory_access.cpu_form(c)
        return c  # the explicit loads and stores are statements: rewritten below

    def on_evaluate(s):
        out = memory_access.cpu_form(s.value) if isinstance(s.value, tvm.ir.Call) else None
        return s if out is None else out

    return map_nodes(stmt, [(tvm.ir.Call, on_call), (tirx.Evaluate, on_evaluate)]
                     + [(kind, _int8_compare) for kind in _COMPARISONS])


def refuse_device_ops(stmt: tirx.Stmt) -> None:
    """Raise :class:`LoweringError` naming the first device op left in the CPU form ``stmt``
    of a kernel (one with no CPU meaning) and the user's line."""
    ops = {d.op for d in all_device_ops().values()}
    left = find_all(stmt, tvm.ir.Call, lambda c: c.op in ops)
    if left:
        at = source_location(left[0].span)
        raise LoweringError(f"the CPU backend has no form of the device op {left[0].op.name} (a "
                            "CUDA instruction); compile this kernel for CUDA" +
                            (f"\n  {at}" if at else ""))


_COMPARISONS = (tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE)


def _int8_compare(c):
    """``a <op> b`` on bools as the same comparison of their int8 values (0 or 1)."""
    if str(c.a.ty) != "bool" or str(c.b.ty) != "bool":
        return c
    return type(c)(tirx.Cast("int8", c.a), tirx.Cast("int8", c.b))
