"""Asynchronous copies issued explicitly, with the public TileLang's names and meaning.

``T.ptx_cp_async(dst, src, num_elems, predicate=None)`` starts one ``cp.async`` of
``num_elems`` elements from global to shared memory (4, 8 or 16 bytes; with a predicate that
is false the destination is zero-filled).  The copy is in flight until the thread's group
holding it is waited for (``T.ptx_commit_group()`` closes the current group,
``T.ptx_wait_group(n)`` waits until at most ``n`` closed groups are in flight) or until the
barrier of a ``T.cp_async_barrier_noinc(bar)`` completes (the thread arrives on ``bar`` once
its earlier copies have landed; the arrival counts against the barrier's arrive count).
``T.async_copy(src, dst)`` is a ``T.copy`` global -> shared made of ``cp.async`` (out-of-range
source elements read as zero) followed by a commit, without a wait.  ``T.tma_store_wait(count,
read)`` waits for the TMA stores of ``T.tma_copy``.  No wait is added for any of them: the
program synchronizes explicitly, and the passes keep its waits as they are.

Each has a CPU form (the copy happens at once; commits and waits do nothing) except the
mbarrier arrival, which needs the GPU's barriers.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx
from tvm.sym import Analyzer

from ..device import sm80, tma
from ..errors import DSLError, DSLTypeError, LoweringError
from ..ir_utils import seq, substitute, uses_var
from ..ops import loops
from ..ops import region as R
from ..ops.base import LowerContext, TileOp, register
from .barrier import _barrier
from .intrinsics import access_origin

_analyzer = Analyzer()


# pointers ---------------------------------------------------------------------------------
def _element_address(ptr: Any, op: str, role: str, scope: str) -> tvm.ir.Call:
    """``address_of(tile[indices])`` for the pointer ``ptr``: a ``T.access_ptr`` of an element
    or slice, an element ``A[i]``, or ``T.address_of(A[i])``; the tile must live in ``scope``
    ("global" or "shared")."""
    load = None
    origin = access_origin(ptr)
    if origin is not None:
        buf, idx, offset = origin
        idx = list(idx)
        if not (isinstance(offset, int) and offset == 0):
            idx[-1] = idx[-1] + offset
        load = tirx.BufferLoad(buf, idx)
    elif isinstance(ptr, tvm.ir.TensorLoad):
        load = ptr
    elif isinstance(ptr, tvm.ir.Call) and isinstance(ptr.op, tvm.ir.Op) and \
            ptr.op.name == "tirx.address_of" and isinstance(ptr.args[0], tvm.ir.TensorLoad):
        load = ptr.args[0]
    if load is None:
        raise DSLError(f"{op}: the {role} must be T.access_ptr(tile[...], ...) of an element or "
                       f"slice (or the element itself), got {ptr!r}")
    buf = load.source
    if not buf.scope().startswith(scope):
        raise DSLError(f"{op}: the {role} {buf.name} is in {buf.scope()} memory; cp.async copies "
                       f"global -> shared")
    return tirx.address_of(tirx.BufferLoad(buf, list(load.indices)))


def _load_of(addr: tvm.ir.Call):
    return addr.args[0]


def _lane_fold(dst, src, num_elems: int, bits: int):
    """Widen a copy written per lane of the enclosing loop (``for i in T.vectorized(4):
    T.ptx_cp_async(S[i], A[i], 1)``) into one copy of all lanes, issued by the loop's first
    iteration: ``(dst, src, num_elems, guard)``.  Only when the copy alone is no legal width,
    the enclosing loop is the innermost frame and both addresses advance by ``num_elems``
    elements per iteration in their last dimension."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import frame as _frames

    frames = IRBuilder.current().frames if IRBuilder.is_in_scope() else []
    if not frames or not isinstance(frames[-1], _frames.ForFrame) or len(frames[-1].vars) != 1:
        return None
    v, dom = frames[-1].vars[0], frames[-1].doms[0]
    lanes = R.as_int(dom.extent)
    if lanes is None or lanes < 2 or (num_elems * lanes * bits) % 8 or \
            num_elems * lanes * bits // 8 not in (4, 8, 16):
        return None
    out = []
    for addr in (dst, src):
        load = _load_of(addr)
        idx = list(load.indices)
        step = _analyzer.simplify(substitute(idx[-1], {v: v + 1}) - idx[-1])
        if not (isinstance(step, tirx.IntImm) and int(step.value) == num_elems):
            return None
        if any(uses_var(i, v) for i in idx[:-1]):
            return None
        first = [substitute(i, {v: dom.min}) for i in idx]
        out.append(tirx.address_of(tirx.BufferLoad(load.source, first)))
    return out[0], out[1], num_elems * lanes, v == dom.min


# T.ptx_cp_async ---------------------------------------------------------------------------
@register
class PtxCpAsync(TileOp):
    """One ``cp.async`` of ``num_elems`` elements from the global element ``src`` to the
    shared element ``dst`` (both ``address_of(tile[...])``), zero-filling when ``predicate``
    is false; only where ``guard`` holds (the first lane of a widened per-lane copy)."""

    name = "tl.ptx_cp_async"
    printer = "ptx_cp_async"
    fields = ("dst", "src", "num_elems", "predicate", "guard")
    writes = ("dst",)


def _nbytes(op: PtxCpAsync) -> int:
    buf = _load_of(op.dst).source
    bits = tvm.DataType(str(buf.dtype)).bits * tvm.DataType(str(buf.dtype)).lanes
    n = R.as_int(op.num_elems)
    if n is None or (n * bits) % 8 or n * bits // 8 not in (4, 8, 16):
        raise LoweringError(f"T.ptx_cp_async into {buf.name}: {op.num_elems} elements of "
                            f"{buf.dtype} are not 4, 8 or 16 bytes (the widths of cp.async)")
    return n * bits // 8


def _guarded(op, stmt: tirx.Stmt) -> tirx.Stmt:
    g = op.guard
    if isinstance(g, (bool, int)) or (isinstance(g, tirx.IntImm) and int(g.value)):
        return stmt if (not isinstance(g, (bool, int)) or g) else tirx.Evaluate(0)
    return tirx.IfThenElse(g, stmt, None)


@PtxCpAsync.lowering("cuda")
def _ptx_cp_async_cuda(op: PtxCpAsync, ctx: LowerContext) -> tirx.Stmt:
    valid = op.predicate if not isinstance(op.predicate, int) else tirx.const(True, "bool")
    return _guarded(op, tirx.Evaluate(sm80.cp_async(op.dst, op.src, _nbytes(op), valid)))


@PtxCpAsync.lowering("cpu")
def _ptx_cp_async_cpu(op: PtxCpAsync, ctx: LowerContext) -> tirx.Stmt:
    """The copy at once: ``num_elems`` elements along the last dimension."""
    d, s = _load_of(op.dst), _load_of(op.src)
    n = R.as_int(op.num_elems)
    if n is None:
        raise LoweringError(f"T.ptx_cp_async into {d.source.name}: the element count "
                            f"{op.num_elems} must be a constant")
    k = tirx.Var("k", "int32")
    di = list(d.indices[:-1]) + [d.indices[-1] + k]
    si = list(s.indices[:-1]) + [s.indices[-1] + k]
    value = loops.cast(tirx.BufferLoad(s.source, si), d.source.dtype)
    if not isinstance(op.predicate, int):
        value = tirx.if_then_else(op.predicate, value, tirx.const(0, d.source.dtype))
    body = tirx.BufferStore(d.source, value, di)
    return _guarded(op, tirx.For(k, 0, n, tirx.ForKind.SERIAL, body))


def ptx_cp_async(dst_access_ptr: Any, src_access_ptr: Any, num_elems: Any,
                 predicate: Any = None) -> tvm.ir.Call:
    """Start a ``cp.async`` of ``num_elems`` elements (of the pointers' element type; 4, 8 or
    16 bytes in all) from global to shared memory; with ``predicate`` false the destination
    elements become zero.  Completes on the thread's cp.async group (``T.ptx_commit_group``
    / ``T.ptx_wait_group``) or on a ``T.cp_async_barrier_noinc`` barrier.  Inside a loop over
    lanes (``for i in T.vectorized(4)``) copies too narrow on their own are widened into one
    copy of all lanes."""
    op = "T.ptx_cp_async"
    dst = _element_address(dst_access_ptr, op, "destination", "shared")
    src = _element_address(src_access_ptr, op, "source", "global")
    if not isinstance(num_elems, (int, tirx.IntImm)) or isinstance(num_elems, bool):
        raise DSLTypeError(f"{op}: num_elems must be a constant int, got {num_elems!r}")
    n = int(num_elems)
    dbuf, sbuf = _load_of(dst).source, _load_of(src).source
    if str(dbuf.dtype) != str(sbuf.dtype):
        raise DSLError(f"{op}: {sbuf.name} holds {sbuf.dtype} but {dbuf.name} holds "
                       f"{dbuf.dtype}; cp.async copies bytes unchanged")
    bits = tvm.DataType(str(dbuf.dtype)).bits
    guard: Any = 1
    if n <= 0:
        raise DSLError(f"{op}: num_elems must be positive, got {n}")
    if (n * bits) % 8 or n * bits // 8 not in (4, 8, 16):
        folded = _lane_fold(dst, src, n, bits)
        if folded is None:
            raise DSLError(f"{op}: {n} elements of {dbuf.dtype} are {n * bits / 8:g} bytes; "
                           "cp.async copies 4, 8 or 16 bytes")
        dst, src, n, guard = folded
    pred = 1 if predicate is None else tirx.Cast("bool", predicate) \
        if str(getattr(predicate, "ty", "bool")) != "bool" else predicate
    return PtxCpAsync(dst=dst, src=src, num_elems=n, predicate=pred, guard=guard).to_call()


# groups -----------------------------------------------------------------------------------
@register
class PtxCommitGroup(TileOp):
    name = "tl.ptx_commit_group"
    printer = "ptx_commit_group"
    fields = ()
    writes = ()


@register
class PtxWaitGroup(TileOp):
    name = "tl.ptx_wait_group"
    printer = "ptx_wait_group"
    fields = ("pending",)
    writes = ()


PtxCommitGroup.lowering("cpu")(lambda op, ctx: tirx.Evaluate(0))
PtxCommitGroup.lowering("cuda")(lambda op, ctx: tirx.Evaluate(sm80.cp_async_commit()))
PtxWaitGroup.lowering("cpu")(lambda op, ctx: tirx.Evaluate(0))
PtxWaitGroup.lowering("cuda")(lambda op, ctx: tirx.Evaluate(sm80.cp_async_wait(op.pending)))


def ptx_commit_group() -> tvm.ir.Call:
    """Close this thread's current group of cp.async copies."""
    return PtxCommitGroup().to_call()


def ptx_wait_group(n: int = 0) -> tvm.ir.Call:
    """Wait until at most ``n`` of this thread's closed cp.async groups are in flight; the
    copies of the others have landed and are visible to this thread."""
    if isinstance(n, tirx.IntImm):
        n = int(n.value)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise DSLTypeError(f"T.ptx_wait_group: n must be a constant int >= 0, got {n!r}")
    return PtxWaitGroup(pending=n).to_call()


# cp.async completing on an mbarrier -------------------------------------------------------
@register
class CpAsyncBarrierNoinc(TileOp):
    name = "tl.cp_async_barrier_noinc"
    printer = "cp_async_barrier_noinc"
    fields = ("barrier",)
    writes = ("barrier",)


@CpAsyncBarrierNoinc.lowering("cuda")
def _noinc_cuda(op, ctx: LowerContext) -> tirx.Stmt:
    return tirx.Evaluate(sm80.cp_async_arrive_noinc(tirx.address_of(op.barrier)))


@CpAsyncBarrierNoinc.lowering("cpu")
def _noinc_cpu(op, ctx: LowerContext) -> tirx.Stmt:
    raise LoweringError(f"T.cp_async_barrier_noinc({op.barrier.source.name}) arrives on an "
                        "mbarrier, which the CPU backend does not have; compile for CUDA")


def cp_async_barrier_noinc(barrier: Any) -> tvm.ir.Call:
    """This thread arrives on ``barrier`` (``bar`` or ``bars[i]`` of ``T.alloc_barrier``) once
    all cp.async copies it issued before have landed; the arrival is one of the barrier's
    arrive count, and the copies' data is visible to whoever waits on that phase."""
    return CpAsyncBarrierNoinc(barrier=_barrier(barrier, "T.cp_async_barrier_noinc")[1]).to_call()


# T.async_copy -----------------------------------------------------------------------------
@register
class AsyncCopy(TileOp):
    """``T.async_copy``: a global -> shared copy made of cp.async, then a commit; no wait."""

    name = "tl.async_copy"
    printer = "async_copy"
    fields = ("src", "dst", "coalesced_width")
    writes = ("dst",)


def async_copy(src: Any, dst: Any, *, coalesced_width: int | None = None,
               annotations: dict | None = None, loop_layout: Any = None) -> tvm.ir.Call:
    """Copy the global region ``src`` to the shared region ``dst`` with ``cp.async`` (rows or
    vectors outside ``src`` read as zero) and close the thread's group; no wait: wait with
    ``T.ptx_wait_group`` before reading ``dst``.  ``annotations`` and ``loop_layout`` are
    scheduling hints, accepted as in ``T.copy``."""
    from ..ops import decode
    from ..ops.copy import copy

    c = decode(copy(src, dst, coalesced_width=coalesced_width, annotations=annotations))
    return AsyncCopy(src=c.src, dst=c.dst, coalesced_width=int(c.coalesced_width)).to_call()


def _as_copy(op: AsyncCopy):
    from ..ops.copy import Copy

    return Copy(span=op.span, src=op.src, dst=op.dst, coalesced_width=op.coalesced_width,
                disable_tma=True, eviction_policy="")


@AsyncCopy.lowering("cuda")
def _async_copy_cuda(op: AsyncCopy, ctx: LowerContext) -> tirx.Stmt:
    import dataclasses

    from ..ops.copy import _capped, _cp_async

    s_scope, d_scope = R.scope_of(op.src), R.scope_of(op.dst)
    if s_scope != "global" or not d_scope.startswith("shared"):
        raise LoweringError(f"T.async_copy only supports global->shared/shared.dyn copies, got "
                            f"{R.describe(op.src)} ({s_scope}) -> {R.describe(op.dst)} "
                            f"({d_scope})")
    cp = _as_copy(op)
    if str(R.buffer_of(op.src).dtype) != str(R.buffer_of(op.dst).dtype):
        raise LoweringError(f"T.async_copy {R.describe(op.src)} -> {R.describe(op.dst)}: "
                            "cp.async cannot convert between dtypes")
    vec = _capped(cp, loops.vector_width([op.src, op.dst], ctx.analyzer))
    nbytes = vec * loops.elem_bytes(R.buffer_of(op.dst).dtype)
    shape = [R.as_int(e) for e in cp.shape()] or [R.as_int(e) for e in R.extents(op.dst)]
    if any(e is None for e in shape):
        raise LoweringError(f"T.async_copy: tile {R.describe(op.dst)} needs a static shape")
    if nbytes not in (4, 8, 16):
        raise LoweringError(f"T.async_copy {R.describe(op.src)} -> {R.describe(op.dst)}: the "
                            f"rows move in {nbytes}-byte pieces; cp.async needs 4, 8 or 16")
    ctx = dataclasses.replace(ctx, async_copy=True)
    return seq([_cp_async(cp, ctx, shape, vec, nbytes), tirx.Evaluate(sm80.cp_async_commit())])


@AsyncCopy.lowering("cpu")
def _async_copy_cpu(op: AsyncCopy, ctx: LowerContext) -> tirx.Stmt:
    from ..ops.copy import elementwise_copy

    if R.scope_of(op.src) != "global" or not R.scope_of(op.dst).startswith("shared"):
        raise LoweringError("T.async_copy only supports global->shared/shared.dyn copies, got "
                            f"{R.describe(op.src)} -> {R.describe(op.dst)}")
    return elementwise_copy(_as_copy(op), ctx)


# TMA stores -------------------------------------------------------------------------------
@register
class TmaStoreWait(TileOp):
    name = "tl.tma_store_wait"
    printer = "tma_store_wait"
    fields = ("pending", "read")
    writes = ()


TmaStoreWait.lowering("cpu")(lambda op, ctx: tirx.Evaluate(0))
TmaStoreWait.lowering("cuda")(
    lambda op, ctx: tirx.Evaluate(tma.tma_store_wait(op.pending, bool(op.read))))


def tma_store_wait(count: int = 0, read: bool = True) -> tvm.ir.Call:
    """Wait until at most ``count`` groups of this thread's TMA stores (``T.tma_copy`` shared
    -> global) are pending: with ``read`` until they have read their shared tiles (which may
    then be overwritten), else until their global writes are done."""
    if isinstance(count, tirx.IntImm):
        count = int(count.value)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise DSLTypeError(f"T.tma_store_wait: count must be a constant int >= 0, got {count!r}")
    return TmaStoreWait(pending=count, read=int(bool(read))).to_call()


__all__ = ["async_copy", "cp_async_barrier_noinc", "ptx_commit_group", "ptx_cp_async",
           "ptx_wait_group", "tma_store_wait"]
