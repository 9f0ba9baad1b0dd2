"""Typed device operations and their declared effects.

A device op is a registered TIR op (``tl.device.*``) whose :class:`Effect` says what it reads
and writes (which call arguments address memory, and in which memory), through which proxy,
whether it completes asynchronously and on what (:class:`Mechanism`), and whether it is a
synchronization of a thread group.  Sync insertion and pipelining compute from these
declarations only (:func:`effect_of`); the text a device op prints as in CUDA is chosen by its
own emitter (``register_device_op(..., emit=...)``), applied by TVM's intrinsic lowering
right before code generation.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

import tvm
from tvm import tirx


class Memory(enum.Enum):
    GLOBAL = "global"
    SHARED = "shared"
    REGISTER = "register"


class Proxy(enum.Enum):
    """How the memory is accessed: by ordinary loads/stores of the threads (generic), or by
    the asynchronous units (TMA, WGMMA operand reads) that need ``fence.proxy.async``."""

    GENERIC = "generic"
    ASYNC = "async"


class Mechanism(enum.Enum):
    """What an asynchronous operation completes on."""

    CP_ASYNC_GROUP = "cp.async group"
    MBARRIER = "mbarrier"
    WGMMA_GROUP = "wgmma group"
    BULK_GROUP = "bulk group"  # TMA stores: cp.async.bulk.commit_group / wait_group

    @property
    def protocol_owned(self) -> bool:
        """Whether completion is waited for by the protocol that issued the op (a pipeline's
        ``ready`` / ``drain`` for cp.async groups, mbarrier waits), rather than after the op's
        own partial wait (``InjectAsyncWaits``: wgmma groups, bulk groups)."""
        return self in (Mechanism.CP_ASYNC_GROUP, Mechanism.MBARRIER)


@dataclass(frozen=True)
class Access:
    """Memory addressed by the call arguments at ``args`` (``address_of(tile[...])``), read or
    written, in ``memory`` (``None``: whichever memory the addressed tile lives in)."""

    args: tuple[int, ...]
    memory: Memory | None
    write: bool = False


@dataclass(frozen=True)
class Sync:
    """The op synchronizes a thread group.  ``barrier_arg``/``count_arg``: positions of the
    barrier id and thread count (a named barrier); ``None`` for a barrier over the group the
    op runs on (the block when it runs on the block).  ``at_entry``: the op contains a
    barrier of its group before its own accesses (a cross-warp reduction), rather than being
    one."""

    barrier_arg: int | None = None
    count_arg: int | None = None
    at_entry: bool = False


@dataclass(frozen=True)
class Effect:
    """What a device op does to memory and to other threads.

    ``completes_on``: the op's writes land later, when ``completes_on`` says so (a cp.async
    group wait, an mbarrier phase, a wgmma group wait), not when the op returns.
    ``commits``: the op closes the current group of that mechanism.  ``waits``: the op blocks
    until that mechanism's earlier work is complete (``pending_arg``: position of the number
    of groups that may stay in flight).  ``releases``: position from which the arguments are
    ``address_of(tile[...])`` of tiles this thread hands over to another agent that may
    overwrite them (a pipeline stage's release): a use of the tiles, so asynchronous reads of
    them must be complete before the op.  ``orders``: position from which the arguments are
    ``address_of(tile[...])`` of the shared tiles whose generic-proxy writes a proxy fence
    orders before this thread's later async-proxy accesses (a fence without them orders all
    memory).  ``atomic``: the op's accesses are atomic (a read-modify-write, an atomic load or
    store): other threads' atomic ops on the same elements do not race with them."""

    accesses: tuple[Access, ...] = ()
    proxy: Proxy = Proxy.GENERIC
    completes_on: Mechanism | None = None
    commits: Mechanism | None = None
    waits: Mechanism | None = None
    pending_arg: int | None = None
    sync: Sync | None = None
    releases: int | None = None
    orders: int | None = None
    atomic: bool = False

    @property
    def reads(self) -> tuple[Access, ...]:
        return tuple(a for a in self.accesses if not a.write)

    @property
    def writes(self) -> tuple[Access, ...]:
        return tuple(a for a in self.accesses if a.write)

    def writes_visible_memory(self) -> bool:
        """Whether other threads can see what the op writes (shared or global memory)."""
        return any(a.write and a.memory != Memory.REGISTER for a in self.accesses)


@dataclass
class DeviceOp:
    name: str
    effect: Effect
    emit: Callable[[tvm.ir.Call], tvm.ir.PrimExpr]
    doc: str = ""
    op: tvm.ir.Op = field(init=False)


_OPS: dict[str, DeviceOp] = {}


def register_device_op(name: str, effect: Effect, emit: Callable, doc: str = "") -> DeviceOp:
    """Register ``name`` as an opaque TIR op with ``effect``; ``emit(call)`` gives the CUDA form
    (a TVM PTX op or a header call) that code generation sees."""
    tvm.ir.register_op_attr(name, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)
    tvm.ir.register_op_attr(name, "TScriptPrinterName", name.replace("tl.device.", "device_"))
    tirx.op.register_intrin_lowering(name, "cuda", f=emit, level=99)
    d = DeviceOp(name, effect, emit, doc)
    d.op = tvm.ir.Op.get(name)
    _OPS[name] = d
    return d


def call(d: DeviceOp, *args, dtype: str = "int32") -> tvm.ir.Call:
    return tvm.ir.Call(d.op, [_arg(a) for a in args], ret_ty=dtype)


def _arg(a):
    if isinstance(a, bool):
        return tirx.const(a, "bool")
    if isinstance(a, int):
        return tirx.const(a, "int32")
    if isinstance(a, str):
        return tvm.ir.StringImm(a)
    return a


def device_op_of(node) -> DeviceOp | None:
    c = node.value if isinstance(node, tirx.Evaluate) else node
    if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op):
        return _OPS.get(c.op.name)
    return None


def is_device_op(node) -> bool:
    return device_op_of(node) is not None


def effect_of(node) -> Effect | None:
    """The declared effect of a device-op call (or of an ``Evaluate`` of one), else ``None``."""
    d = device_op_of(node)
    return d.effect if d is not None else None


def synchronizes(call) -> bool:
    """Whether ``call`` makes threads wait for each other: a device op with a ``sync`` effect
    (named, block or grid barriers) or TVM's block barrier ``tvm_storage_sync``."""
    eff = effect_of(call)
    if eff is not None:
        return eff.sync is not None
    return isinstance(call, tvm.ir.Call) and call.op.same_as(_STORAGE_SYNC)


_STORAGE_SYNC = tvm.ir.Op.get("tirx.tvm_storage_sync")


def accessed_buffers(call: tvm.ir.Call, access: Access) -> list:
    """The buffers an access of ``call`` addresses: the tile of each ``address_of(tile[...])``
    argument at the access's positions."""
    return _tiles_at(call, access.args)


def released_buffers(call: tvm.ir.Call) -> list:
    """The tiles a call hands over (``Effect.releases``), else ``[]``."""
    eff = effect_of(call)
    if eff is None or eff.releases is None:
        return []
    return _tiles_at(call, range(eff.releases, len(call.args)))


def ordered_buffers(call: tvm.ir.Call) -> list | None:
    """The tiles a proxy fence orders (``Effect.orders``); ``None`` when it orders all memory
    (or is not such a fence)."""
    eff = effect_of(call)
    if eff is None or eff.orders is None or len(call.args) <= eff.orders:
        return None
    return _tiles_at(call, range(eff.orders, len(call.args)))


def _tiles_at(call: tvm.ir.Call, positions) -> list:
    out = []
    for i in positions:
        a = call.args[i]
        if isinstance(a, tvm.ir.Call) and isinstance(a.op, tvm.ir.Op) and \
                a.op.name == "tirx.address_of" and isinstance(a.args[0], tvm.ir.TensorLoad):
            out.append(a.args[0].source)
    return out


def all_device_ops() -> dict[str, DeviceOp]:
    return dict(_OPS)
