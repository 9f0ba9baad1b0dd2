"""``ScalarBindings``: kernel scalars assigned once become the expression they name, and a
vectorized loop never keeps a mutable scalar.

The parser makes every kernel-valued name a one-element ``local`` buffer (``index = bx * 512 +
tx * 4 + v`` is an allocation and a store, reads are loads), which is right for a scalar the
body updates but wrong inside ``T.vectorized``: TVM's vectorizer stores the lanes into the one
element in turn and the body then runs once, with the last lane's value (a silent wrong answer
on every target).

Expects: a parsed kernel (runs first).  Guarantees:
- a one-element ``local`` buffer with exactly one store, at the top level of the sequence that
  allocates it, of a *pure* value (arithmetic of variables and constants: no load, no call
  with effects), read only by loads after that store, is removed: each load becomes the value
  (the public TileLang's ``x = expr`` is such a binding);
- a ``T.vectorized`` loop in which every lane would store to the same element (a scalar the
  body updates, or any store whose index does not use the loop variable) runs as a serial loop
  (correct, slower), with a debug log saying why.
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm import tirx

from ..ir_utils import StmtMutator, map_nodes, seq
from .passes import function_pass

log = logging.getLogger("tilelang")


def _key(x) -> int:
    return x.__chandle__()


def _is_scalar(buf) -> bool:
    return str(buf.scope()) == "local" and len(buf.shape) == 1 and \
        isinstance(buf.shape[0], tirx.IntImm) and int(buf.shape[0]) == 1


def _pure(e) -> bool:
    """Arithmetic of variables and constants: no load, no call of an op with effects."""
    ok = [True]

    def on_load(_):
        ok[0] = False

    def on_call(c):
        if not (isinstance(c.op, tvm.ir.Op) and c.op.name.startswith("tirx.") and
                c.op.name not in ("tirx.call_extern", "tirx.call_pure_extern",
                                  "tirx.call_packed", "tirx.tvm_access_ptr",
                                  "tirx.address_of")):
            ok[0] = False

    tvm_ffi.structural_walk(e, [(tvm.ir.TensorLoad, on_load), (tvm.ir.Call, on_call)])
    return ok[0]


class _Uses:
    """Per scalar buffer: its stores, and whether anything but a load of element 0 or a store
    names it (an address taken, a region)."""

    def __init__(self, body):
        self.stores: dict = {}
        self.other: set = set()

        def on_store(s):
            self.stores.setdefault(_key(s.buffer), []).append(s)

        def on_call(c):
            if isinstance(c.op, tvm.ir.Op) and c.op.name in ("tirx.address_of",
                                                              "tirx.tvm_access_ptr"):
                for b in _buffers(c):
                    self.other.add(_key(b))

        def on_region(r):
            self.other.add(_key(r.source))

        tvm_ffi.structural_walk(body, [(tirx.BufferStore, on_store),
                                       (tvm.ir.Call, on_call),
                                       (tvm.ir.TensorRegion, on_region)])


def _buffers(node) -> list:
    out = []
    tvm_ffi.structural_walk(node, [(tvm.ir.TensorLoad, lambda x: out.append(x.source))])
    return out


def _reads(node, key) -> bool:
    found = []
    tvm_ffi.structural_walk(node, [(tvm.ir.TensorLoad,
                                    lambda x: found.append(1) if _key(x.source) == key
                                    else None)])
    return bool(found)


class _Inline(StmtMutator):
    def __init__(self, uses: _Uses):
        self.uses = uses

    def visit_SeqStmt(self, s):
        stmts = list(s.seq)
        out, i = [], 0
        while i < len(stmts):
            st = stmts[i]
            b = st.buffer if isinstance(st, tirx.AllocBuffer) else None
            j = self._single_store(b, stmts, i) if b is not None and _is_scalar(b) else None
            if j is None:
                out.append(self.visit(st))
                i += 1
                continue
            value = stmts[j].value
            key = _key(b)
            rest = [_substitute_loads(x, key, value) for x in stmts[i + 1:j] + stmts[j + 1:]]
            stmts = stmts[:i] + rest  # the allocation and the store are gone
        return seq(out)

    def _single_store(self, b, stmts, i):
        """Index in ``stmts`` of the one store of scalar ``b`` allocated at ``i``, if ``b``
        can become its value there."""
        key = _key(b)
        stores = self.uses.stores.get(key, [])
        if len(stores) != 1 or key in self.uses.other:
            return None
        for j in range(i + 1, len(stmts)):
            st = stmts[j]
            if isinstance(st, tirx.BufferStore) and _key(st.buffer) == key:
                ok = _pure(st.value) and not _reads(st.value, key) and \
                    all(isinstance(ix, tirx.IntImm) and int(ix) == 0 for ix in st.indices)
                return j if ok else None
            if _reads(st, key):
                return None  # read before it is assigned
        return None


def _substitute_loads(node, key, value):
    def on_load(x):
        return value if _key(x.source) == key else x

    return map_nodes(node, [(tvm.ir.TensorLoad, on_load)])


class _SerialVectorLoops(StmtMutator):
    """``T.vectorized`` loops in which every lane would store to the same element (a kernel
    scalar the body updates, or any store whose index does not use the loop variable) run
    serially: the lanes depend on each other."""

    def visit_For(self, s):
        body = self(s.body)
        kind = s.kind
        if kind == tirx.ForKind.VECTORIZED:
            v = _key(s.loop_var)
            shared_lane = []

            def on_store(st):
                uses = []
                for ix in st.indices:
                    tvm_ffi.structural_walk(ix, [(tirx.Var, lambda x: uses.append(_key(x)))])
                if v not in uses:
                    shared_lane.append(st.buffer.name)

            tvm_ffi.structural_walk(body, [(tirx.BufferStore, on_store)])
            if shared_lane:
                log.debug("T.vectorized loop over %s runs serially: every lane would store "
                          "to the same element of %s", s.loop_var.name, shared_lane[0])
                kind = tirx.ForKind.SERIAL
        return tirx.For(s.loop_var, s.min, s.extent, kind, body, s.thread_binding,
                        s.annotations, s.step, span=s.span)


@function_pass("tl.ScalarBindings")
def ScalarBindings(func: tirx.PrimFunc) -> tirx.PrimFunc:
    body = _Inline(_Uses(func.body))(func.body)
    return func.with_body(_SerialVectorLoops()(body))
