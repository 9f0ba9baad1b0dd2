"""``InjectAsyncWaits``: wait for asynchronous register operations before their data is used.

Expects: lowered kernels (per-thread register arrays, device ops with declared effects).
Guarantees: when a statement issues ops that complete on a wait-group mechanism
(``Effect.completes_on``; today ``wgmma`` groups) and leaves groups in flight (its last wait
of that mechanism keeps ``pending > 0``, as ``T.gemm(..., wg_wait=k)`` does), every buffer
those ops access (the accumulator and register operands, the shared operands they read) is
*in flight*; before the first later statement of the same sequence, or of a later iteration
of an enclosing loop, that loads, stores or passes such a buffer to another op, a wait of the
mechanism with ``pending = 0`` is inserted.  A statement that hands tiles over
(``Effect.releases``: the arrival that releases a pipeline stage to its producer, or the end of
a cp.async stage before the group's next barrier) uses them, so the wait comes before it.
Statements in between (independent work) run while the groups are in flight.  Ops of the
same mechanism (the next wgmma into the same accumulator) are ordered by the hardware and need
no wait; a wait with ``pending = 0`` of the sequence itself (the one ``wg_wait=0`` emits)
completes everything before it.  Mechanisms whose completion the issuing protocol waits for
(``Mechanism.protocol_owned``: cp.async groups of a pipeline, mbarriers) are left to it.
Analysis is per buffer.  The pass reasons from effects only.  CPU: unchanged.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..device.effects import accessed_buffers, all_device_ops, effect_of, released_buffers
from ..engine.target import is_cpu
from .passes import function_pass, target_of


def _key(x):
    return x.__chandle__()


def _waiter(mechanism):
    """The device op that waits on ``mechanism`` with a pending count."""
    for d in all_device_ops().values():
        if d.effect.waits == mechanism and d.effect.pending_arg is not None:
            return d
    return None


def _tracked(mechanism) -> bool:
    """Whether this pass waits for ``mechanism``: it has a group wait, and no protocol of its
    own waits for it."""
    return mechanism is not None and not mechanism.protocol_owned and \
        _waiter(mechanism) is not None


def _completes_all(stmt):
    """The mechanism ``stmt`` (a bare wait with ``pending = 0``) completes, else ``None``."""
    eff = effect_of(stmt) if isinstance(stmt, tirx.Evaluate) else None
    if eff is None or eff.pending_arg is None or not _tracked(eff.waits):
        return None
    pending = stmt.value.args[eff.pending_arg]
    return eff.waits if isinstance(pending, tirx.IntImm) and int(pending.value) == 0 else None


def _issues(stmt) -> dict:
    """mechanism -> (keys of buffers its async ops access, pending count of the last wait
    of it in ``stmt`` or None)."""
    out: dict = {}

    def on_call(c):
        eff = effect_of(c)
        if eff is None:
            return
        if _tracked(eff.completes_on):
            keys, last = out.get(eff.completes_on, (set(), None))
            for acc in eff.accesses:
                keys.update(_buffers_in(c, acc))
            out[eff.completes_on] = (keys, None)
        elif eff.waits is not None and eff.pending_arg is not None and eff.waits in out:
            keys, _ = out[eff.waits]
            out[eff.waits] = (keys, int(c.args[eff.pending_arg].value))

    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, on_call))
    return out


def _buffers_in(call, access) -> set:
    """Keys of the tiles whose addresses the access's arguments hold (also inside a descriptor
    built from ``address_of(tile[...])``)."""
    out = set()

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and c.op.name == "tirx.address_of" and \
                isinstance(c.args[0], tvm.ir.TensorLoad):
            out.add(_key(c.args[0].source))

    for i in access.args:
        tvm_ffi.structural_walk(call.args[i], (tvm.ir.Call, on_call))
    return out


def _touched(stmt, mechanism) -> set:
    """Buffers ``stmt`` accesses (or hands over) other than through async ops of
    ``mechanism``."""
    out = set()

    def on_call(c):
        eff = effect_of(c)
        if eff is not None and eff.completes_on == mechanism:
            return tvm_ffi.WalkResult.SKIP
        if eff is not None:
            for acc in eff.accesses:
                out.update(_key(b) for b in accessed_buffers(c, acc))
            out.update(_key(b) for b in released_buffers(c))
        return None

    def on_load(x):
        out.add(_key(x.source))

    def on_store(s):
        out.add(_key(s.buffer))

    tvm_ffi.structural_walk(stmt, [(tvm.ir.Call, on_call), (tvm.ir.TensorLoad, on_load),
                                   (tirx.BufferStore, on_store)], order="pre")
    return out


class _Waits:
    """``pending``: mechanism -> keys of buffers in flight."""

    def stmt(self, s, pending: dict):
        if isinstance(s, tirx.SeqStmt):
            out = []
            for x in s.seq:
                y, pending = self.stmt(x, pending)
                out.append(y)
            return tirx.SeqStmt(out), pending
        if isinstance(s, tirx.For) and _issues(s.body):
            _, end = self.stmt(s.body, dict(pending))
            merged = {m: pending.get(m, set()) | end.get(m, set()) for m in set(pending) | set(end)}
            body, end = self.stmt(s.body, merged)
            return (tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding,
                             s.annotations, s.step), end)
        if isinstance(s, tirx.AttrStmt) and _issues(s.body):
            body, end = self.stmt(s.body, pending)
            return tirx.AttrStmt(s.node, s.attr_key, s.value, body), end
        if isinstance(s, tirx.IfThenElse) and _issues(s):
            pre, pending = self.wait_for(s.condition, pending)
            then, p1 = self.stmt(s.then_case, pending)
            els, p2 = (self.stmt(s.else_case, pending) if s.else_case is not None
                       else (None, pending))
            out = tirx.IfThenElse(s.condition, then, els)
            merged = {m: p1.get(m, set()) | p2.get(m, set()) for m in set(p1) | set(p2)}
            return (tirx.SeqStmt(pre + [out]) if pre else out), merged
        # a leaf (or a compound statement without issues of its own): wait first if it uses
        # what is in flight
        pre, pending = self.wait_for(s, pending)
        done = _completes_all(s)
        if done is not None:
            pending.pop(done, None)
        for mech, (keys, last) in _issues(s).items():
            if last is None or last > 0:
                pending[mech] = pending.get(mech, set()) | keys
            else:
                pending.pop(mech, None)
        return (tirx.SeqStmt(pre + [s]) if pre else s), pending

    @staticmethod
    def wait_for(node, pending: dict):
        """Waits (with pending 0) for the mechanisms whose in-flight buffers ``node`` uses."""
        pre, pending = [], dict(pending)
        for mech, keys in list(pending.items()):
            if keys & _touched(node, mech):
                w = _waiter(mech)
                pre.append(tirx.Evaluate(tvm.ir.Call(w.op, [tirx.const(0, "int32")],
                                                     ret_ty="int32")))
                del pending[mech]
        return pre, pending


@function_pass("tl.InjectAsyncWaits")
def InjectAsyncWaits(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    body, _ = _Waits().stmt(func.body, {})
    return func.with_body(body)
