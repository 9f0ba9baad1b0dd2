"""``ScalarizeBoolVectors`` (CUDA): a vectorized loop that loads or stores a ``bool`` buffer
runs unrolled, one element per access.

TVM's CUDA code generator has no vector type of ``bool``: it prints four bools as ``ushort4``
(8 bytes for 4, so the access is twice too wide and misaligned at most addresses: a
"misaligned address" fault or a write past the buffer) and rejects eight or sixteen.  Vector
loops over bools come from the tile operators (``T.copy`` of a bool region vectorizes like any
other 1-byte type) and from ``T.vectorized``.  The CPU backend vectorizes bools correctly and
is left alone.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..engine.target import is_cpu
from ..ir_utils import StmtMutator
from .passes import function_pass, target_of


def _touches_bool(body) -> bool:
    found = []

    def on_access(node):
        buf = node.source if isinstance(node, tvm.ir.TensorLoad) else node.buffer
        if str(buf.dtype) == "bool":
            found.append(node)

    tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, on_access),
                                   (tirx.BufferStore, on_access)])
    return bool(found)


class _Scalarize(StmtMutator):
    def visit_For(self, s):
        out = self.generic(s)
        if out.kind == tirx.ForKind.VECTORIZED and _touches_bool(out.body):
            return tirx.For(out.loop_var, out.min, out.extent, tirx.ForKind.UNROLLED, out.body,
                            out.thread_binding, out.annotations, out.step, span=s.span)
        return out


@function_pass("tl.ScalarizeBoolVectors")
def ScalarizeBoolVectors(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """CUDA: vectorized loops touching ``bool`` buffers become unrolled loops."""
    if is_cpu(target_of(func)):
        return func
    return func.with_body(_Scalarize()(func.body))


__all__ = ["ScalarizeBoolVectors"]
