"""Which tensor parameters a tile program writes.

A parameter is written when the program stores to it (``B[i] = ...``), names it as the
destination of a tile operator (``T.copy(x, B)``, ``T.fill``, ``T.atomic_*``, ``T.reduce_*``,
``T.cumsum``, the accumulator of ``T.gemm``), passes it to a tile operator whose destinations
are not known here, or hands its raw pointer to any other call.  Everything else only reads it.
The answer is conservative: a parameter that might be written is reported as written.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

# The fields of each tile operator that it writes; an operator missing here writes every
# buffer argument it has.
DESTINATIONS: dict[str, tuple[str, ...]] = {
    "tl.copy": ("dst",),
    "tl.fill": ("dst",),
    "tl.atomic": ("dst",),
    "tl.reduce": ("dst",),
    "tl.cumsum": ("dst",),
    "tl.gemm": ("C",),
    "tl.annotate_layout": (),
    "tl.use_swizzle": (),
}


def written_params(func: tirx.PrimFunc) -> list[str]:
    """The names of the tensor parameters of ``func`` that its body may write, in order."""
    from ..ops.base import TILE_OPS

    params = [p for p in func.params if is_buffer_var(p)]
    written: set[int] = set()

    def mark(node) -> None:
        for i, p in enumerate(params):
            if node.same_as(p):
                written.add(i)

    def buffers_in(node) -> list:
        """The buffers ``node`` refers to as a whole or a region (not those in its indices)."""
        found = []

        def on_region(r):
            found.append(r.source)
            return tvm_ffi.WalkResult.SKIP

        def on_node(n):
            if is_buffer_var(n):
                found.append(n)

        tvm_ffi.structural_walk(node, [((tvm.ir.TensorRegion, tvm.ir.TensorLoad), on_region),
                                       (object, on_node)], order="pre")
        return found

    def on_store(s: tirx.BufferStore):
        mark(s.buffer)

    def on_call(c: tvm.ir.Call):
        if not isinstance(c.op, tvm.ir.Op):
            return None
        cls = TILE_OPS.get(c.op.name)
        if cls is None:  # an ordinary call: a raw buffer argument may be written through
            for a in c.args:
                if is_buffer_var(a):
                    mark(a)
            return None
        fields = DESTINATIONS.get(c.op.name)
        args = dict(zip(cls.fields, c.args))
        targets = list(c.args) if fields is None else [args[f] for f in fields if f in args]
        hit = [b for t in targets for b in buffers_in(t)]
        if fields and not hit:  # a destination given by omission (e.g. in place): all of them
            hit = buffers_in(c)
        for b in hit:
            mark(b)
        return tvm_ffi.WalkResult.SKIP

    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, on_store), (tvm.ir.Call, on_call)],
                            order="pre")
    return [params[i].name for i in sorted(written)]
