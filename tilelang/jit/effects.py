"""Which tensor parameters a tile program writes, and which global tensors it touches other
than as the destination of a ``T.copy``.

A parameter is written when the program stores to it (``B[i] = ...``), names it as the
destination a tile operator declares (``TileOp.writes``: ``T.copy(x, B)``, ``T.fill``,
``T.atomic_*``, ``T.reduce_*``, the accumulator of ``T.gemm``, ...), passes it to a tile operator
that declares none, or hands its raw pointer to any other call.  Everything else only reads it.
The answer is conservative: a parameter that might be written is reported as written.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var


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


def written_tensors(body: tirx.Stmt) -> frozenset:
    """The handles of the global tensors ``body`` may write: stores to them, the destinations
    each tile operator declares (``TileOp.writes``; every buffer argument of one that declares
    none), and raw buffers handed to any other call; a ``T.view`` / ``T.reshape`` is the bytes
    of its tensor, so a write through either is a write of both."""
    from ..language.view import view_roots, viewed_buffer
    from ..ops.base import TILE_OPS

    found: set = set()

    def on_decl(d):  # a view's declaration reads nothing and writes nothing
        return tvm_ffi.WalkResult.SKIP if viewed_buffer(d) is not None else None

    def mark(bufs) -> None:
        found.update(b.__chandle__() for b in bufs
                     if is_buffer_var(b) and b.scope() == "global")

    def on_store(s: tirx.BufferStore):
        mark([s.buffer])

    def on_call(c: tvm.ir.Call):
        if not isinstance(c.op, tvm.ir.Op):
            return None
        cls = TILE_OPS.get(c.op.name)
        if cls is None:  # an ordinary call: a raw buffer argument may be written through
            mark(c.args)
            return None
        args = dict(zip(cls.fields, c.args))
        targets = list(c.args) if cls.writes is None else \
            [args[f] for f in cls.writes if f in args]
        hit = [b for t in targets for b in _buffers_in(t)]
        if cls.writes and not hit:  # a destination given by omission (in place): all of them
            hit = _buffers_in(c)
        mark(hit)
        return tvm_ffi.WalkResult.SKIP

    tvm_ffi.structural_walk(body, [(tirx.DeclBuffer, on_decl), (tirx.BufferStore, on_store),
                                   (tvm.ir.Call, on_call)], order="pre")
    roots = view_roots(body)
    hit = {roots.get(h, h) for h in found}
    return frozenset(hit | {v for v, r in roots.items() if r in hit})


def written_params(func: tirx.PrimFunc) -> list[str]:
    """The names of the tensor parameters of ``func`` that its body may write, in order."""
    written = written_tensors(func.body)
    return [p.name for p in func.params if is_buffer_var(p) and p.__chandle__() in written]
