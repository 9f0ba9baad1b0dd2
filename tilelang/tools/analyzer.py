"""``Analyzer.analysis(func, device)``: the work a tile program does, counted from its IR before
compilation: the floating-point operations of its gemms and the bytes its copies move between
global memory and the chip, over the whole grid (every loop around an op multiplies it; loops
and grids must have constant extents)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
from tvm import tirx

from ..errors import TileLangError
from ..ops import decode
from ..ops import region as R
from ..ops.copy import Copy
from ..ops.gemm import Gemm


@dataclass
class AnalysisResult:
    """What :meth:`Analyzer.analysis` counted: ``total_flops`` (2 m n k per gemm),
    ``total_global_bytes`` (copies from or to global memory), and their ratio."""

    total_flops: int
    total_global_bytes: int
    device: Any = None

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of global memory traffic."""
        return self.total_flops / self.total_global_bytes if self.total_global_bytes else 0.0


class Analyzer:
    """Counts the work of a ``T.prim_func`` (see the module docstring)."""

    @staticmethod
    def analysis(func: tirx.PrimFunc, device: Any = None) -> AnalysisResult:
        flops, nbytes = _count(func.body, 1)
        return AnalysisResult(flops, nbytes, device)


def _extent(value, what: str) -> int:
    if not isinstance(value, tirx.IntImm):
        raise TileLangError(f"Analyzer: {what} has the non-constant extent {value}; give the "
                            "program constant sizes")
    return int(value.value)


def _count(stmt, times: int) -> tuple[int, int]:
    if isinstance(stmt, tirx.SeqStmt):
        totals = [_count(s, times) for s in stmt.seq]
        return sum(f for f, _ in totals), sum(b for _, b in totals)
    if isinstance(stmt, tirx.For):
        return _count(stmt.body, times * _extent(stmt.extent, f"loop {stmt.loop_var.name}"))
    if isinstance(stmt, tirx.AttrStmt):
        if stmt.attr_key == "thread_extent" and stmt.node.thread_tag.startswith("blockIdx"):
            times *= _extent(stmt.value, stmt.node.thread_tag)
        return _count(stmt.body, times)
    if isinstance(stmt, tirx.IfThenElse):
        then = _count(stmt.then_case, times)
        other = _count(stmt.else_case, times) if stmt.else_case is not None else (0, 0)
        return max(then[0], other[0]), max(then[1], other[1])  # the larger branch bounds it
    if isinstance(stmt, tirx.Evaluate):
        op = decode(stmt)
        if isinstance(op, Gemm):
            m, n, k = (R.as_int(x) for x in op.mnk())
            if None in (m, n, k):
                raise TileLangError(f"Analyzer: T.gemm with symbolic sizes {op.mnk()}")
            return times * 2 * m * n * k, 0
        if isinstance(op, Copy):
            return 0, times * _global_bytes(op)
        return 0, 0
    body = getattr(stmt, "body", None)
    return _count(body, times) if isinstance(body, tirx.Stmt) else (0, 0)


def _global_bytes(op: Copy) -> int:
    for region in (op.src, op.dst):
        if R.scope_of(region) == "global":
            n = 1
            for e in R.extents(region):
                n *= R.as_int(e) or 0
            return n * tvm.DataType(R.buffer_of(region).dtype).bits // 8 if n else 0
    return 0
