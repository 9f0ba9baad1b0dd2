"""Which tensor parameters a tile program writes, and which global tensors it touches other
than as the destination of a ``T.copy``.

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


def _buffers_in(node) -> list:
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


def accessed_besides_copies(body: tirx.Stmt) -> frozenset:
    """The handles of the global tensors ``body`` accesses other than as the destination of a
    ``T.copy``: element loads and stores, every other tile-operator argument (the destinations
    of ``T.fill``, ``T.atomic_*`` and the like included), a raw buffer handed to any other
    call, and the buffers in the indices of a ``T.copy``'s destination.  A tensor outside the
    answer is only ever written, and only by ``T.copy``."""
    from ..ops.base import TILE_OPS

    found: set = set()

    def add(bufs) -> None:
        found.update(b.__chandle__() for b in bufs
                     if is_buffer_var(b) and b.scope() == "global")

    def on_load(x):
        add([x.source])

    def on_store(s):
        add([s.buffer])

    def walk(node) -> None:
        tvm_ffi.structural_walk(node, [(tvm.ir.Call, on_call), (tvm.ir.TensorLoad, on_load),
                                       (tirx.BufferStore, on_store)], order="pre")

    def on_call(c: tvm.ir.Call):
        if not isinstance(c.op, tvm.ir.Op):
            return None
        cls = TILE_OPS.get(c.op.name)
        if cls is None:
            add(c.args)
            return None
        for name, arg in zip(cls.fields, c.args):
            if c.op.name != "tl.copy" or name != "dst":
                add(_buffers_in(arg))
                walk(arg)
            elif isinstance(arg, tvm.ir.TensorRegion):  # a copy's destination: its indices
                for r in arg.region:
                    walk(r.min)
                    walk(r.extent)
            elif isinstance(arg, tvm.ir.TensorLoad):
                for i in arg.indices:
                    walk(i)
        return tvm_ffi.WalkResult.SKIP

    walk(body)
    return frozenset(found)


def written_params(func: tirx.PrimFunc) -> list[str]:
    """The names of the tensor parameters of ``func`` that its body may write, in order."""
    from ..ops.base import TILE_OPS

    params = [p for p in func.params if is_buffer_var(p)]
    written: set[int] = set()

    def mark(node) -> None:
        for i, p in enumerate(params):
            if node.same_as(p):
                written.add(i)

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
        hit = [b for t in targets for b in _buffers_in(t)]
        if fields and not hit:  # a destination given by omission (e.g. in place): all of them
            hit = _buffers_in(c)
        for b in hit:
            mark(b)
        return tvm_ffi.WalkResult.SKIP

    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, on_store), (tvm.ir.Call, on_call)],
                            order="pre")
    return [params[i].name for i in sorted(written)]
