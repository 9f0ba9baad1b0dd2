"""Warp-level programming: votes, shuffles, warp reductions, block votes, bit searches over
lane masks, and the warp / lane indices of the calling thread.

These are SIMT operations: every thread of the warp (``*_sync``: every lane in ``mask``)
calls them at the same place, as in CUDA; a kernel using one runs its scalar statements on
every thread (like a kernel that reads ``T.get_thread_binding``).  A warp is 32 threads of
consecutive linear thread index (``tx + ty * X + tz * X * Y``).  Masks are ``uint32`` lane
masks, all lanes by default.  The indices are computed from the thread index the program
sees, so they keep their meaning when the compiler adds producer warps (warp
specialization).  The CPU backend runs a block on one thread: the collectives are rejected
there with a ``LoweringError`` naming the op (``T.__ffs`` and the indices' arithmetic aside).
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx
from tvm.script import tirx as _T
from tvm.script.ir_builder import IRBuilder

from ..device import warp as dev
from ..errors import DSLError, DSLTypeError
from .kernel import _stack

WARP_SIZE = 32
WARPS_PER_GROUP = 4
FULL_MASK = 0xFFFFFFFF


# argument checks -------------------------------------------------------------------------

def _expr(value: Any, op: str, what: str):
    value = getattr(value, "scalar", value)  # a T.alloc_var
    if hasattr(value, "asobject"):  # ``a == b`` / ``a != b`` of TVM expressions, unevaluated
        value = value.asobject()
    if isinstance(value, bool):
        return tirx.const(value, "bool")
    if isinstance(value, int):
        return tirx.const(value, "int32" if -2**31 <= value < 2**31 else "int64")
    if isinstance(value, float):
        return tirx.const(value, "float32")
    if isinstance(value, tvm.ir.Expr) and isinstance(value.ty, tvm.ir.PrimType):
        return value
    raise DSLTypeError(f"{op}: {what} must be a scalar expression, got {value!r}")


def _dtype(e):
    return e.ty.dtype


def _predicate(value: Any, op: str):
    """An ``int32`` predicate: 0 or not 0."""
    p = _expr(value, op, "the predicate")
    dt = _dtype(p)
    if dt.is_bool:
        return tirx.Cast("int32", p)
    if not dt.is_integer:
        raise DSLTypeError(f"{op} requires an integer or boolean predicate, got {dt} ({value!r})")
    if str(dt) == "int32":
        return p
    return tirx.Cast("int32", p != tirx.const(0, str(dt)))


def _integer(value: Any, op: str, what: str, dtype: str = "int32"):
    e = _expr(value, op, what)
    dt = _dtype(e)
    if not dt.is_integer:
        raise DSLTypeError(f"{op}: {what} must be an integer, got {dt} ({value!r})")
    return e if str(dt) == dtype else tirx.Cast(dtype, e)


def _mask(mask: Any, op: str):
    if isinstance(mask, int) and not isinstance(mask, bool) and not 0 <= mask <= FULL_MASK:
        raise DSLError(f"{op}: mask {mask:#x} is not a 32-bit lane mask")
    if isinstance(mask, int) and not isinstance(mask, bool):
        return tirx.const(mask, "uint32")
    return _integer(mask, op, "mask", "uint32")


def _simt() -> None:
    """The enclosing kernel (if any) runs its scalar statements on every thread."""
    if _stack:
        _stack[-1].reads_thread_index = True


def _call(op, *args, dtype: str):
    _simt()
    return dev.call(op, *args, dtype=dtype)


# votes ------------------------------------------------------------------------------------

def any_sync(predicate: Any, mask: Any = FULL_MASK) -> Any:
    """Non-zero (``int32``) when ``predicate`` is non-zero on any lane in ``mask``
    (``__any_sync``)."""
    op = "T.any_sync"
    return _call(dev.ANY_SYNC, _mask(mask, op), _predicate(predicate, op), dtype="int32")


def all_sync(predicate: Any, mask: Any = FULL_MASK) -> Any:
    """Non-zero (``int32``) when ``predicate`` is non-zero on every lane in ``mask``
    (``__all_sync``)."""
    op = "T.all_sync"
    return _call(dev.ALL_SYNC, _mask(mask, op), _predicate(predicate, op), dtype="int32")


def ballot_sync(predicate: Any, mask: Any = FULL_MASK) -> Any:
    """A ``uint64`` lane mask: bit ``i`` is set when lane ``i`` is in ``mask`` and its
    ``predicate`` is non-zero (``__ballot_sync``; the upper 32 bits are 0)."""
    op = "T.ballot_sync"
    return _call(dev.BALLOT_SYNC, _mask(mask, op), _predicate(predicate, op), dtype="uint64")


def ballot(predicate: Any) -> Any:
    """``T.ballot_sync(predicate)`` over the whole warp."""
    op = "T.ballot"
    return _call(dev.BALLOT_SYNC, _mask(FULL_MASK, op), _predicate(predicate, op),
                 dtype="uint64")


def activemask() -> Any:
    """A ``uint64`` mask of the lanes of the warp that execute this call (``__activemask``)."""
    return _call(dev.ACTIVEMASK, dtype="uint64")


def _match_value(value: Any, op: str):
    v = _expr(value, op, "value")
    dt = _dtype(v)
    if dt.is_bool:
        return tirx.Cast("int32", v)
    if dt.bits not in (32, 64) or not (dt.is_integer or dt.is_float):
        raise DSLTypeError(f"{op}: value must be a 32- or 64-bit integer or float, got {dt}")
    return v


def match_any_sync(value: Any, mask: Any = FULL_MASK) -> Any:
    """A ``uint32`` mask of the lanes in ``mask`` whose ``value`` equals this lane's
    (``__match_any_sync``, sm_70 and later)."""
    op = "T.match_any_sync"
    return _call(dev.MATCH_ANY_SYNC, _mask(mask, op), _match_value(value, op), dtype="uint32")


def match_all_sync(value: Any, mask: Any = FULL_MASK) -> Any:
    """``mask`` (``uint32``) when every lane in ``mask`` holds the same ``value``, else 0
    (``__match_all_sync``, sm_70 and later).  Inside a kernel only: the builtin's
    predicate output needs a per-thread variable."""
    from .allocate import LOCAL
    from .kernel import _current

    op = "T.match_all_sync"
    _current(op)
    m, v = _mask(mask, op), _match_value(value, op)
    pred = _T.alloc_buffer([1], "int32", scope=LOCAL)
    IRBuilder.name("match_pred", pred)
    addr = tirx.address_of(tirx.BufferLoad(pred, [tirx.const(0, "int32")]))
    return _call(dev.MATCH_ALL_SYNC, m, v, addr, dtype="uint32")


# block votes ------------------------------------------------------------------------------

def syncthreads_count(predicate: Any) -> Any:
    """A barrier of the whole block (``__syncthreads``) that returns, to every thread, how many
    threads had a non-zero ``predicate`` (``__syncthreads_count``).  Every thread of the block
    must reach it."""
    return _call(dev.SYNCTHREADS["count"], _predicate(predicate, "T.syncthreads_count"),
                 dtype="int32")


def syncthreads_and(predicate: Any) -> Any:
    """A block barrier returning non-zero when every thread's ``predicate`` is non-zero
    (``__syncthreads_and``)."""
    return _call(dev.SYNCTHREADS["and"], _predicate(predicate, "T.syncthreads_and"),
                 dtype="int32")


def syncthreads_or(predicate: Any) -> Any:
    """A block barrier returning non-zero when any thread's ``predicate`` is non-zero
    (``__syncthreads_or``)."""
    return _call(dev.SYNCTHREADS["or"], _predicate(predicate, "T.syncthreads_or"),
                 dtype="int32")


def sync_warp(mask: Any = None) -> Any:
    """The lanes in ``mask`` (default: all) wait for each other, and their shared and global
    memory accesses before it are visible to each other after it (``__syncwarp``)."""
    op = "T.sync_warp"
    return _call(dev.SYNC_WARP, _mask(FULL_MASK if mask is None else mask, op), dtype="void")


# shuffles ---------------------------------------------------------------------------------

def _shuffle(mode: str, op: str, value: Any, lane: Any, width: Any, mask: Any) -> Any:
    v = _expr(value, op, "value")
    if _dtype(v).is_bool:
        raise DSLTypeError(f"{op}: value must be a number, got bool")
    if isinstance(width, int) and (width < 1 or width > WARP_SIZE or width & (width - 1)):
        raise DSLError(f"{op}: width must be a power of two from 1 to {WARP_SIZE}, got {width}")
    return _call(dev.SHUFFLE[mode], _mask(mask, op), v, _integer(lane, op, "the lane"),
                 _integer(width, op, "width"), dtype=str(_dtype(v)))


def shfl_sync(value: Any, srcLane: Any, width: Any = WARP_SIZE, mask: Any = FULL_MASK) -> Any:
    """``value`` as held by lane ``srcLane`` of this lane's group of ``width`` lanes
    (``__shfl_sync``)."""
    return _shuffle("idx", "T.shfl_sync", value, srcLane, width, mask)


def shfl_xor(value: Any, delta: Any, width: Any = WARP_SIZE, mask: Any = FULL_MASK) -> Any:
    """``value`` as held by lane ``lane ^ delta`` (``__shfl_xor_sync``)."""
    return _shuffle("xor", "T.shfl_xor", value, delta, width, mask)


def shfl_down(value: Any, delta: Any, width: Any = WARP_SIZE, mask: Any = FULL_MASK) -> Any:
    """``value`` as held by lane ``lane + delta`` (this lane's own past the group's end;
    ``__shfl_down_sync``)."""
    return _shuffle("down", "T.shfl_down", value, delta, width, mask)


def shfl_up(value: Any, delta: Any, width: Any = WARP_SIZE, mask: Any = FULL_MASK) -> Any:
    """``value`` as held by lane ``lane - delta`` (this lane's own before the group's start;
    ``__shfl_up_sync``)."""
    return _shuffle("up", "T.shfl_up", value, delta, width, mask)


# warp reductions --------------------------------------------------------------------------

def _warp_reduce(kind: str, value: Any) -> Any:
    op = f"T.warp_reduce_{kind}"
    v = _expr(value, op, "value")
    dt = _dtype(v)
    if dt.is_bool or (kind.startswith("bit") and not dt.is_integer):
        raise DSLTypeError(f"{op}: value must be {'an integer' if kind.startswith('bit') else 'a number'}, got {dt}")
    return _call(dev.WARP_REDUCE[kind], v, dtype=str(dt))


def warp_reduce_sum(value: Any) -> Any:
    """The sum of ``value`` over the 32 lanes of the warp, returned to every lane; every lane
    must call it."""
    return _warp_reduce("sum", value)


def warp_reduce_max(value: Any) -> Any:
    """The maximum of ``value`` over the warp's 32 lanes, returned to every lane."""
    return _warp_reduce("max", value)


def warp_reduce_min(value: Any) -> Any:
    """The minimum of ``value`` over the warp's 32 lanes, returned to every lane."""
    return _warp_reduce("min", value)


def warp_reduce_bitand(value: Any) -> Any:
    """The bitwise and of an integer ``value`` over the warp's 32 lanes, to every lane."""
    return _warp_reduce("bitand", value)


def warp_reduce_bitor(value: Any) -> Any:
    """The bitwise or of an integer ``value`` over the warp's 32 lanes, to every lane."""
    return _warp_reduce("bitor", value)


# bit searches -----------------------------------------------------------------------------

def __ffs(value: Any) -> Any:
    """One plus the position of the lowest set bit of an integer ``value`` (``int32``), 0 when
    ``value`` is 0 (``__ffs``, ``__ffsll`` for 64-bit values)."""
    op = "T.__ffs"
    v = _expr(value, op, "value")
    dt = _dtype(v)
    if not dt.is_integer or dt.bits not in (32, 64):
        raise DSLTypeError(f"{op}: value must be a 32- or 64-bit integer, got {dt}")
    return dev.call(dev.FFS, v, dtype="int32")


def __fns(mask: Any, base: Any, offset: Any) -> Any:
    """The position (``uint32``) of the ``offset``-th set bit of the 32-bit ``mask`` counted
    from bit ``base`` (upwards for ``offset > 0``, downwards for ``offset < 0``; ``offset`` 0:
    ``base`` itself when set), ``0xFFFFFFFF`` when there is none (``__fns``)."""
    op = "T.__fns"
    return _call(dev.FNS, _integer(mask, op, "mask", "uint32"),
                 _integer(base, op, "base", "uint32"), _integer(offset, op, "offset"),
                 dtype="uint32")


# indices ----------------------------------------------------------------------------------

def _size(value: Any, default: int, op: str, what: str):
    if value is None:
        return tirx.const(default, "int32")
    if isinstance(value, int) and not isinstance(value, bool) and value < 1:
        raise DSLError(f"{op}: {what} must be positive, got {value}")
    return _integer(value, op, what)


def _linear_thread(op: str):
    """The calling thread's linear index in the block, from the thread indices the program
    sees (``tx + ty * X + tz * X * Y``)."""
    from .kernel import _current

    k = _current(op)
    k.reads_thread_index = True
    lin, stride = None, None
    for var, ext in zip(k.thread_vars, k.threads):
        term = var if stride is None else var * stride
        lin = term if lin is None else lin + term
        stride = ext if stride is None else stride * ext
    return lin


def get_lane_idx(warp_size: Any = None) -> Any:
    """The calling thread's lane in its warp: linear thread index mod ``warp_size`` (32)."""
    op = "T.get_lane_idx"
    return tirx.floormod(_linear_thread(op), _size(warp_size, WARP_SIZE, op, "warp_size"))


def get_warp_idx(warp_size: Any = None) -> Any:
    """The calling thread's warp in the block: linear thread index div ``warp_size`` (32)."""
    op = "T.get_warp_idx"
    return tirx.floordiv(_linear_thread(op), _size(warp_size, WARP_SIZE, op, "warp_size"))


def get_warp_idx_sync(warp_size: Any = None) -> Any:
    """``T.get_warp_idx``, for a converged warp (the same value; the public name says the
    caller guarantees convergence)."""
    op = "T.get_warp_idx_sync"
    return tirx.floordiv(_linear_thread(op), _size(warp_size, WARP_SIZE, op, "warp_size"))


def get_warp_group_idx(warp_size: Any = None, warps_per_group: Any = None) -> Any:
    """The calling thread's warp group: linear thread index div
    ``warp_size * warps_per_group`` (32 * 4)."""
    op = "T.get_warp_group_idx"
    if warps_per_group is not None and warp_size is None:
        raise DSLError(f"{op}: give warp_size too when giving warps_per_group")
    lin = _linear_thread(op)
    size = _size(warp_size, WARP_SIZE, op, "warp_size")
    per = _size(warps_per_group, WARPS_PER_GROUP, op, "warps_per_group")
    return tirx.floordiv(lin, size * per)


def shuffle_elect(thread_extent: int) -> Any:
    """True (``bool``) on one thread of each group of ``thread_extent`` consecutive threads
    (the group's first), false elsewhere; ``thread_extent=0``: on one thread of the block
    (thread 0)."""
    op = "T.shuffle_elect"
    if isinstance(thread_extent, tirx.IntImm):
        thread_extent = int(thread_extent.value)
    if isinstance(thread_extent, bool) or not isinstance(thread_extent, int) or thread_extent < 0:
        raise DSLTypeError(f"{op}: thread_extent must be a non-negative Python int, got "
                           f"{thread_extent!r}")
    lin = _linear_thread(op)
    zero = tirx.const(0, str(_dtype(lin)))
    if thread_extent == 0:
        return tirx.EQ(lin, zero)
    return tirx.EQ(tirx.floormod(lin, thread_extent), zero)


__all__ = [
    "activemask", "all_sync", "any_sync", "ballot", "ballot_sync", "get_lane_idx",
    "get_warp_group_idx", "get_warp_idx", "get_warp_idx_sync", "match_all_sync",
    "match_any_sync", "shfl_down", "shfl_sync", "shfl_up", "shfl_xor", "shuffle_elect",
    "sync_warp", "syncthreads_and", "syncthreads_count", "syncthreads_or", "warp_reduce_bitand",
    "warp_reduce_bitor", "warp_reduce_max", "warp_reduce_min", "warp_reduce_sum", "__ffs",
    "__fns",
]
