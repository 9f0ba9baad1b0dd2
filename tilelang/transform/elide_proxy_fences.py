"""``ElideProxyFences``: drop the proxy fences that order nothing.

Expects: lowered kernels (device ops with declared effects), shared tiles not merged yet.
Guarantees: a ``fence.proxy.async`` that names its tiles (``Effect.orders``: the one a wgmma
puts before reading its shared operands) is removed when no statement of the kernel writes any
of those tiles through the generic proxy: then every write of them is asynchronous (TMA), and
the mbarrier the reader waited on already orders it.  A tile counts as written through the
generic proxy when a store writes it, a device op of the generic proxy declares a write of it
(``cp.async``, ``stmatrix``), or a call whose effect is unknown (an external function) takes
its address.  Fences without tiles (the user's ``T.fence_proxy_async()``) stay.  CPU: unchanged.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..device.effects import Proxy, accessed_buffers, device_op_of, ordered_buffers
from ..engine.target import is_cpu
from ..ir_utils import StmtMutator
from .passes import function_pass, target_of


def _key(buf) -> int:
    return buf.__chandle__()


def _views(body) -> dict:
    """Key of each view (``DeclBuffer`` with ``data``) -> keys of the tiles it aliases."""
    out: dict = {}

    def on_decl(d):
        if d.data is not None:
            tiles = []
            tvm_ffi.structural_walk(d.data, (tirx.Buffer, tiles.append))
            out.setdefault(_key(d.buffer), set()).update(_key(t) for t in tiles)

    tvm_ffi.structural_walk(body, (tirx.DeclBuffer, on_decl))
    return out


def _is_shared(buf) -> bool:
    return str(buf.scope()).startswith("shared")


def generic_writes(body: tirx.Stmt) -> set:
    """Keys (:func:`_key`) of the shared tiles some statement of ``body`` may write through
    the generic proxy."""
    out = set()

    def add(buf):
        if _is_shared(buf):
            out.add(_key(buf))

    def on_call(c):
        d = device_op_of(c)
        if d is not None:
            if d.effect.proxy == Proxy.GENERIC:
                for acc in d.effect.writes:
                    for b in accessed_buffers(c, acc):
                        add(b)
            return tvm_ffi.WalkResult.SKIP  # its other address arguments are declared unused
        if isinstance(c.op, tvm.ir.Op) and c.op.name == "tirx.address_of" and \
                isinstance(c.args[0], tvm.ir.TensorLoad):
            add(c.args[0].source)  # an address given to code of unknown effect
        return None

    def on_store(s):
        add(s.buffer)

    tvm_ffi.structural_walk(body, [(tvm.ir.Call, on_call), (tirx.BufferStore, on_store)],
                            order="pre")
    return _with_aliases(out, _views(body))


def _with_aliases(keys, views: dict) -> set:
    """``keys`` and the tiles the views among them alias."""
    out = set(keys)
    for k in keys:
        out |= views.get(k, set())
    return out


@function_pass("tl.ElideProxyFences")
def ElideProxyFences(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    return func.with_body(_Elide(generic_writes(func.body), _views(func.body))(func.body))


class _Elide(StmtMutator):
    def __init__(self, written: set, views: dict):
        self.written, self.views = written, views

    def visit_Evaluate(self, s):
        tiles = ordered_buffers(s.value) if isinstance(s.value, tvm.ir.Call) else None
        if tiles and not _with_aliases({_key(b) for b in tiles}, self.views) & self.written:
            return None
        return s
