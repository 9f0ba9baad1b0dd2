"""Atomics: ``T.atomic_add | atomic_max | atomic_min`` and the bitwise ``T.atomic_or |
atomic_and | atomic_xor`` (read-modify-write that concurrent threads and blocks may apply to
the same element without losing updates), the vector adds ``T.atomic_addx2 | atomic_addx4``,
and ``T.atomic_load | atomic_store`` with a memory order.

``dst`` is an element (``C[i, j]``) with a scalar ``value``; a region with a region or buffer
``value`` of the same shape once unit dims are dropped (element-wise); or a region with a
scalar ``value`` (every element of the region updated by it).  An element ``dst`` with a tile
``value`` stands for the region of ``value``'s shape starting there, as in ``T.copy``.  The
result is converted to ``dst``'s dtype.  ``return_prev=True`` (element form, and the vector
adds) makes the call an expression: the element's value before this update (the vector adds:
a vector of the ``lanes`` previous values, to store into a slice).  ``memory_order`` is one of
``cuda::memory_order``'s names (``"relaxed"`` ... ``"seq_cst"``); a load takes no release
order and a store no acquire order (``ValueError``).

``per_thread`` (set by the language layer for kernels that read raw thread indices): an element
update outside ``T.Parallel`` is made by every thread that runs it, not once per block.

An expression form (``return_prev=True``, ``T.atomic_load``) becomes a statement placed where
the statement that contains it runs, which stores into a fresh per-thread variable; the
expression reads that variable.  In a ``while`` condition it would be taken once, before the
loop: assign it inside the loop instead.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx
from tvm.ir import Range

from ..device import atomics as device
from ..errors import DSLError, LoweringError, TileOpError
from . import loops
from . import region as R
from .base import LowerContext, TileOp, register

# Marks lowered atomics so that the CPU launch knows to run the grid's blocks in order.
ATOMIC_MARK = "tl.atomic_region"

MEMORY_ORDERS = device.MEMORY_ORDERS
RMW_KINDS = tuple(device.RMW_HELPERS)  # add, max, min, or, and, xor
BITWISE = ("or", "and", "xor")
# the orders a load / a store may have (a load has no release half, a store no acquire half)
LOAD_ORDERS = ("relaxed", "consume", "acquire", "seq_cst")
STORE_ORDERS = ("relaxed", "release", "seq_cst")
# the destination dtypes whose vector adds can return the previous values (a CUDA vector type)
VEC_PREV_DTYPES = ("float32", "float16", "bfloat16")


@register
class Atomic(TileOp):
    """``kind``: add, max, min, or, and, xor, load or store.  ``order``: a ``cuda::memory_order`` number.
    ``lanes``: 2 or 4 for the vector adds (``dst`` and ``value`` are then ``lanes``
    consecutive elements).  ``per_thread``: made by every thread that runs the statement
    (a kernel that reads raw thread indices), not once per block.  ``prev``: the per-thread
    variable that receives the element's previous value (the loaded value for a load)."""

    name = "tl.atomic"
    printer = "atomic"
    fields = ("kind", "dst", "value", "order", "lanes", "per_thread", "prev")
    writes = ("dst",)
    defaults = {"order": 0, "lanes": 1, "per_thread": 0, "prev": None}


# the language ------------------------------------------------------------------------------
def _memory_order(memory_order: Any, opname: str, default: str,
                  allowed: tuple = tuple(MEMORY_ORDERS)) -> int:
    if memory_order is None:
        return MEMORY_ORDERS[default]
    names = {v: k for k, v in MEMORY_ORDERS.items()}
    if isinstance(memory_order, int) and not isinstance(memory_order, bool):
        memory_order = names.get(memory_order, memory_order)
    if isinstance(memory_order, str) and memory_order in allowed:
        return MEMORY_ORDERS[memory_order]
    raise DSLError(f"{opname.removeprefix('T.')} does not support memory_order "
                   f"{memory_order!r}: it takes one of {', '.join(allowed)} (or its "
                   "cuda::memory_order number)")


# The per-thread variables holding the results of expression-form atomics parsed so far
# (buffer handle -> the call as written), for :func:`check_eager_results`.
eager_results: dict = {}


def _emit_with_result(op: Atomic, dtype: str, lanes: int = 1):
    """Place ``op`` as a statement that stores its result into a fresh per-thread variable
    (``lanes`` elements for the vector adds) and return the read of that variable (a vector
    of ``lanes`` for those)."""
    from tvm.script import tirx as _T

    name = f"T.atomic_{op.kind}" + (f"x{lanes}" if lanes > 1 else "") + \
        ("(...)" if op.kind == "load" else "(..., return_prev=True)")
    if lanes > 1:
        buf = _T.alloc_buffer((lanes,), dtype, scope="local")
        eager_results[buf.__chandle__()] = name
        _T.evaluate(op.replace(prev=R.full_region(buf)).to_call())
        return tirx.BufferLoad(buf, [tirx.Ramp(tirx.const(0, "int32"), tirx.const(1, "int32"),
                                               lanes)])
    var = _T.alloc_scalar(dtype, scope="local.var")
    load = getattr(var, "scalar", var)
    eager_results[load.source.__chandle__()] = name
    _T.evaluate(op.replace(prev=R.full_region(load.source)).to_call())
    return load


def check_eager_results(func: tirx.PrimFunc) -> None:
    """Raise :class:`DSLError` where the value of an expression-form atomic is read only on
    one side of a condition (``T.if_then_else(c, T.atomic_add(..., return_prev=True), 0)``,
    ``x if c else y``, the right operand of ``and``/``or``), or by a ``while`` condition: the
    atomic is made as a statement before the one containing it, whether or not the condition
    holds, and once before a loop."""
    import tvm_ffi

    from ..errors import source_location

    if not eager_results:
        return
    ite = tvm.ir.Op.get("prim.if_then_else")
    found: list = []

    def reads_result(e) -> str | None:
        hit = []
        tvm_ffi.structural_walk(e, (tvm.ir.TensorLoad, lambda x: hit.append(
            eager_results.get(x.source.__chandle__()))))
        return next((h for h in hit if h), None)

    def conditional_parts(e) -> list:
        if isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) and e.op.same_as(ite):
            return [e.args[1], e.args[2]]
        if isinstance(e, tirx.Select):
            return [e.true_value, e.false_value]
        if isinstance(e, (tirx.And, tirx.Or)):
            return [e.b]
        return []

    def on_stmt(st):
        if found:
            return
        parts = []
        tvm_ffi.structural_walk(st, [(t, lambda e: parts.extend(conditional_parts(e)))
                                     for t in (tvm.ir.Call, tirx.Select, tirx.And, tirx.Or)])
        for p in parts:
            name = reads_result(p)
            if name:
                found.append((name, st.span))
                return

    def on_while(w):
        name = None if found else reads_result(w.condition)
        if name:
            found.append((name, w.span, "while"))

    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, on_stmt), (tirx.Evaluate, on_stmt),
                                        (tirx.Bind, on_stmt), (tirx.While, on_while)])
    if found:
        name, span, *kind = found[0]
        where = source_location(span)
        why = (f"{name} in a `while` condition is made once, before the loop, not at every "
               "test; assign it inside the loop instead") if kind else (
            f"{name} is read on one side of a condition, but it is made before the statement "
            "that contains it whether or not the condition holds; make it under an `if` "
            "statement instead")
        raise DSLError(why + (f"\n  {where}" if where else ""))


def _scalar_dst(dst: Any, opname: str):
    d = R.region_of(dst, opname, "destination")
    if R.squeeze(R.extents(d)):
        raise TileOpError(f"{opname}: needs a single-element destination, got {R.describe(d)}")
    return d


def _scalar_value(value: Any, dtype: str):
    return tirx.const(value, dtype) if isinstance(value, (int, float)) else loops.cast(value, dtype)


def _single(region) -> bool:
    return not R.squeeze(R.extents(region))


def _atomic(kind: str, dst: Any, value: Any, memory_order: Any = None,
            return_prev: bool = False, per_thread: bool = False):
    opname = f"T.atomic_{kind}"
    order = _memory_order(memory_order, opname, "relaxed")
    value = getattr(value, "scalar", value)
    if R.is_buffer(value) or R.is_region(value):
        v = R.region_of(value, opname, "value")
        d = R.region_of(dst, opname, "destination", like_shape=R.extents(v))
        if not R.same_shape(R.squeeze(R.extents(v)), R.squeeze(R.extents(d))):
            raise TileOpError(
                f"{opname}: value {R.describe(v)} {R.fmt_shape(R.extents(v))} and destination "
                f"{R.describe(d)} {R.fmt_shape(R.extents(d))} differ in shape"
            )
        if _single(d):  # one element each (a 1-element tensor and a per-thread value)
            v = tirx.BufferLoad(R.buffer_of(v), R.mins(v))
        elif return_prev:
            raise TileOpError(f"{opname}: return_prev=True needs an element destination and a "
                              "scalar value (the old value of one element)")
    else:
        d, v = R.region_of(dst, opname, "destination"), value
        if return_prev and not _single(d):
            raise TileOpError(f"{opname}: return_prev=True needs a single-element destination "
                              f"(the old value of one element), got {R.describe(d)}")
    dtype = R.buffer_of(d).dtype
    if kind in BITWISE and not tvm.DataType(dtype).is_integer:
        raise TileOpError(f"{opname}: needs an integer destination, got {R.describe(d)} of "
                          f"{dtype}")
    if not R.is_region(v):
        v = _scalar_value(v, dtype)
    op = Atomic(kind=kind, dst=d, value=v, order=order, per_thread=int(per_thread))
    if return_prev:
        return _emit_with_result(op, dtype)
    return op.to_call()


def atomic_add(dst: Any, value: Any, memory_order: str | None = None,
               return_prev: bool = False, use_tma: bool = False, per_thread: bool = False):
    """``dst += value`` atomically (element or region).  With ``return_prev=True`` (element
    form) the call is the element's value before the add.  ``use_tma`` is accepted for the
    public API; the add is made with atomics either way (same result)."""
    return _atomic("add", dst, value, memory_order, return_prev, per_thread)


def atomic_max(dst: Any, value: Any, memory_order: str | None = None,
               return_prev: bool = False, per_thread: bool = False):
    """``dst = max(dst, value)`` atomically (element or region)."""
    return _atomic("max", dst, value, memory_order, return_prev, per_thread)


def atomic_min(dst: Any, value: Any, memory_order: str | None = None,
               return_prev: bool = False, per_thread: bool = False):
    """``dst = min(dst, value)`` atomically (element or region)."""
    return _atomic("min", dst, value, memory_order, return_prev, per_thread)


def atomic_or(dst: Any, value: Any, memory_order: str | None = None,
              return_prev: bool = False, per_thread: bool = False):
    """``dst |= value`` atomically (integer element or region)."""
    return _atomic("or", dst, value, memory_order, return_prev, per_thread)


def atomic_and(dst: Any, value: Any, memory_order: str | None = None,
               return_prev: bool = False, per_thread: bool = False):
    """``dst &= value`` atomically (integer element or region)."""
    return _atomic("and", dst, value, memory_order, return_prev, per_thread)


def atomic_xor(dst: Any, value: Any, memory_order: str | None = None,
               return_prev: bool = False, per_thread: bool = False):
    """``dst ^= value`` atomically (integer element or region)."""
    return _atomic("xor", dst, value, memory_order, return_prev, per_thread)


def _lanes_region(x: Any, lanes: int, opname: str, role: str):
    """``lanes`` consecutive elements along the last dim, from an element, a vector element
    (``A[T.Ramp(j, 1, lanes)]``) or a region of that many elements."""
    x = getattr(x, "scalar", x)
    if R.is_element(x):
        idx = list(x.indices)
        last = idx[-1]
        if isinstance(last, tirx.Ramp):
            if R.as_int(last.stride) != 1 or R.as_int(last.lanes) != lanes:
                raise TileOpError(f"{opname}: {role} {x} must address {lanes} consecutive "
                                  "elements (a ramp of stride 1)")
            idx[-1] = last.base
        ext = [1] * (len(idx) - 1) + [lanes]
        return tirx.BufferRegion(x.source, [Range.from_min_extent(i, e)
                                            for i, e in zip(idx, ext)])
    if R.is_region(x) or R.is_buffer(x):
        r = R.region_of(x, opname, role)
        ext = [R.as_int(e) for e in R.extents(r)]
        if ext[-1] == lanes and all(e == 1 for e in ext[:-1]):
            return r
        raise TileOpError(f"{opname}: {role} {R.describe(r)} {R.fmt_shape(R.extents(r))} must be "
                          f"{lanes} consecutive elements along its last dim")
    raise TileOpError(f"{opname}: {role} must be an element of a buffer (the first of {lanes} "
                      f"consecutive ones) or a slice of {lanes} elements, got {x!r}")


def _atomic_addx(lanes: int, dst: Any, value: Any, memory_order: Any, return_prev: bool,
                 per_thread: bool):
    opname = f"T.atomic_addx{lanes}"
    d = _lanes_region(dst, lanes, opname, "destination")
    v = _lanes_region(value, lanes, opname, "value")
    order = _memory_order(memory_order, opname, "relaxed")
    op = Atomic(kind="add", dst=d, value=v, order=order, lanes=lanes,
                per_thread=int(per_thread))
    if return_prev:
        dtype = R.buffer_of(d).dtype
        if dtype not in VEC_PREV_DTYPES:
            raise TileOpError(f"{opname}: return_prev=True is for float32, float16 and bfloat16 "
                              f"destinations, got {R.describe(d)} of {dtype}")
        return _emit_with_result(op, dtype, lanes)
    return op.to_call()


def atomic_addx2(dst: Any, value: Any, return_prev: bool = False,
                 memory_order: str | None = None, per_thread: bool = False):
    """``dst[..., j:j+2] += value[..., j:j+2]`` atomically, from the first elements ``dst``
    and ``value`` (or 2-element slices); one packed instruction for float16 / bfloat16 (and
    float32 on sm_90) when ``dst`` is aligned to the pair.  ``return_prev=True``: the two
    previous values, a 2-lane vector (``Prev[0:2] = T.atomic_addx2(..., return_prev=True)``)."""
    return _atomic_addx(2, dst, value, memory_order, return_prev, per_thread)


def atomic_addx4(dst: Any, value: Any, return_prev: bool = False,
                 memory_order: str | None = None, per_thread: bool = False):
    """``dst[..., j:j+4] += value[..., j:j+4]`` atomically (see :func:`atomic_addx2`; float32
    uses one ``float4`` atomic on sm_90 when aligned to 16 bytes)."""
    return _atomic_addx(4, dst, value, memory_order, return_prev, per_thread)


def atomic_load(src: Any, memory_order: str = "seq_cst"):
    """The value of element ``src``, read atomically with ``memory_order`` (an expression)."""
    opname = "T.atomic_load"
    d = _scalar_dst(src, opname)
    dtype = R.buffer_of(d).dtype
    op = Atomic(kind="load", dst=d, value=tirx.const(0, dtype),
                order=_memory_order(memory_order, opname, "seq_cst", LOAD_ORDERS), per_thread=1)
    return _emit_with_result(op, dtype)


def atomic_store(dst: Any, src: Any, memory_order: str = "seq_cst", per_thread: bool = False):
    """``dst = src`` (an element and a scalar), stored atomically with ``memory_order``."""
    opname = "T.atomic_store"
    d = _scalar_dst(dst, opname)
    v = _scalar_value(getattr(src, "scalar", src), R.buffer_of(d).dtype)
    return Atomic(kind="store", dst=d, value=v,
                  order=_memory_order(memory_order, opname, "seq_cst", STORE_ORDERS),
                  per_thread=int(per_thread)).to_call()


def apply(kind: str, old, new):
    """The value ``kind`` leaves in an element that held ``old``."""
    if kind == "add":
        return old + new
    if kind in ("max", "min"):
        return tirx.max(old, new) if kind == "max" else tirx.min(old, new)
    return {"or": tirx.bitwise_or, "and": tirx.bitwise_and, "xor": tirx.bitwise_xor}[kind](old,
                                                                                      new)


# CUDA --------------------------------------------------------------------------------------
def _inside(op: Atomic, checks: list, update: tirx.Stmt) -> tirx.Stmt:
    """``update`` made only where ``checks`` (its elements lie inside ``dst``) hold; a dropped
    update's old values (``return_prev``, ``T.atomic_load``) read 0, as an out-of-range load
    of a global tensor does."""
    cond = loops.all_of(checks)
    if cond is None:
        return update
    zeros = None
    if op.prev is not None:
        pb, at = R.buffer_of(op.prev), R.mins(op.prev)
        zeros = tirx.SeqStmt([tirx.BufferStore(pb, tirx.const(0, pb.dtype), at[:-1] + [at[-1] + k])
                              for k in range(op.lanes)]) if op.lanes > 1 else \
            tirx.BufferStore(pb, tirx.const(0, pb.dtype), at)
    return tirx.IfThenElse(cond, update, zeros)


def _element_update(op: Atomic, ctx: LowerContext) -> tirx.Stmt:
    """The update of one element (or of ``lanes`` consecutive ones) as one device call,
    storing the old value into ``prev`` when asked; dropped outside ``dst`` (see
    :func:`_inside`)."""
    dst = R.buffer_of(op.dst)
    di = R.mins(op.dst)
    addr = tirx.address_of(tirx.BufferLoad(dst, di))
    into = None if op.prev is None else tirx.address_of(
        tirx.BufferLoad(R.buffer_of(op.prev), R.mins(op.prev)))
    last = di[:-1] + [di[-1] + op.lanes - 1]
    if op.lanes > 1:
        vb, vi = R.buffer_of(op.value), R.mins(op.value)
        vals = [loops.cast(tirx.BufferLoad(vb, vi[:-1] + [vi[-1] + k]), dst.dtype)
                for k in range(op.lanes)]
        call = device.add_vec(op.order, addr, vals, into)
    elif op.kind == "store":
        call = device.store(op.order, addr, op.value, dst.dtype)
    elif op.kind == "load":
        call = device.load(op.order, addr, into)
    else:
        call = device.rmw(op.kind, op.order, addr, op.value, dst.dtype, into)
    checks = loops.bounds_checks(dst, last, ctx.analyzer)
    if op.lanes > 1:  # the first lane too: a run may straddle either end
        checks = loops.bounds_checks(dst, di, ctx.analyzer) + checks
    return _inside(op, checks, tirx.Evaluate(call))


def _owner(op: Atomic, ctx: LowerContext):
    """The thread that makes a block-level update: the holder of the fragment element its
    value reads, else thread 0."""
    import tvm
    import tvm_ffi

    loads = []
    tvm_ffi.structural_walk(op.value, (tvm.ir.TensorLoad, loads.append))
    for x in loads:
        if x.source.scope() == "local.fragment":
            return ctx.layout(x.source).forward(list(x.indices))[0]
    return tirx.const(0, "int32")


@Atomic.lowering("cuda", when=lambda op, ctx: op.lanes > 1 or _single(op.dst))
def _atomic_element_cuda(op: Atomic, ctx: LowerContext) -> tirx.Stmt:
    """Inside a ``T.Parallel`` loop, one update per loop element by the thread that runs it;
    in a kernel that reads raw thread indices, one by every thread that runs the statement;
    otherwise one per block, by the owner thread, whose old value (``return_prev``) reaches
    the other threads through a shared slot.  A load is every thread's own."""
    update = _element_update(op, ctx)
    if ctx.in_parallel or op.per_thread or op.kind == "load":
        return update
    owner = ctx.thread_var == _owner(op, ctx)
    if op.prev is None:
        return tirx.IfThenElse(owner, update, None)
    pb = R.buffer_of(op.prev)
    slot = tirx.decl_buffer(list(pb.shape), pb.dtype, f"{pb.name}_slot", scope="shared.dyn")
    made = _element_update(op.replace(prev=R.full_region(slot)), ctx)
    passed = [tirx.BufferStore(pb, tirx.BufferLoad(slot, [k]), [k])
              for k in (tirx.const(i, "int32") for i in range(R.as_int(pb.shape[0])))]
    return tirx.SeqStmt([tirx.AllocBuffer(slot), tirx.IfThenElse(owner, made, None), *passed])


@Atomic.lowering("cuda")
def _atomic_region_cuda(op: Atomic, ctx: LowerContext) -> tirx.Stmt:
    """A region update: each element once, by the thread that holds it in a whole ``value``
    fragment (replica 0), else by the threads of the element-wise layout (a scalar value:
    the same for every element)."""
    from ..layout.fragment import elementwise

    dst = R.buffer_of(op.dst)
    if not R.is_region(op.value):
        def scalar_body(indices):
            call = device.rmw(op.kind, op.order, tirx.address_of(
                tirx.BufferLoad(dst, indices[0])), op.value, dst.dtype)
            return loops.guard(loops.bounds_checks(dst, indices[0], ctx.analyzer),
                               tirx.Evaluate(call))

        nest = loops.element_nest([op.dst], scalar_body, kind=loops.PARALLEL, prefix="a",
                                  analyzer=ctx.analyzer)
        shape = [R.as_int(e) for e in R.squeeze(R.extents(op.dst))]
        return loops.with_layout(nest, elementwise(shape, ctx.num_threads))
    vb = R.buffer_of(op.value)
    # a whole fragment value: the nest has its shape (unit dims too) and follows its layout
    by_fragment = vb.scope() == "local.fragment" and R.same_shape(R.extents(op.value), vb.shape)
    if vb.scope() == "local.fragment" and not by_fragment:
        raise LoweringError(f"T.atomic_{op.kind}: on CUDA a fragment value ({vb.name}) is used "
                            f"whole, not as the slice {R.describe(op.value)}")
    lanes = _vector_lanes(op, ctx)
    if lanes > 1:
        return _vector_region_add(op, ctx, lanes)

    def body(indices):
        di, vi = indices
        val = loops.cast(tirx.BufferLoad(vb, vi), dst.dtype)
        call = device.rmw(op.kind, op.order, tirx.address_of(tirx.BufferLoad(dst, di)), val,
                          dst.dtype)
        return loops.guard(loops.bounds_checks(dst, di, ctx.analyzer), tirx.Evaluate(call))

    nest = loops.element_nest([op.dst, op.value], body, kind=loops.PARALLEL, prefix="a",
                              analyzer=ctx.analyzer, whole=1 if by_fragment else None)
    if by_fragment:
        return loops.with_layout(nest, ctx.layout(vb))
    shape = [R.as_int(e) for e in R.squeeze(R.extents(op.dst))]
    return loops.with_layout(nest, elementwise(shape, ctx.num_threads))


# the widest packed add of a destination dtype (elements per AtomicAddxN)
VECTOR_LANES = {"float32": 4, "float16": 2, "bfloat16": 2}


def _vector_lanes(op: Atomic, ctx: LowerContext) -> int:
    """Elements per packed add of a region add between memory tiles of one dtype whose last
    dims are contiguous and aligned to the vector (1: element by element).  Fragment values
    are read by their owner threads, element by element."""
    want = VECTOR_LANES.get(str(R.buffer_of(op.dst).dtype), 1)
    vb = R.buffer_of(op.value)
    if op.kind != "add" or want == 1 or vb.scope() == "local.fragment" or \
            vb.scope() in ("local", "local.var"):
        return 1
    width = loops.vector_width([op.dst, op.value], ctx.analyzer,
                               max_bytes=want * loops.elem_bytes(str(vb.dtype)))
    return width if width > 1 else 1


def _vector_region_add(op: Atomic, ctx: LowerContext, lanes: int) -> tirx.Stmt:
    """A region add as packed adds of ``lanes`` consecutive elements (``AtomicAddx2/x4``,
    with the op's memory order), spread over the threads like any element-wise nest."""
    from ..layout.fragment import elementwise

    dst, vb = R.buffer_of(op.dst), R.buffer_of(op.value)
    shape = [R.as_int(e) for e in R.squeeze(R.extents(op.dst))]
    groups = shape[:-1] + [shape[-1] // lanes]

    def at(iv):
        local = list(iv[:-1]) + [iv[-1] * lanes]
        di = loops.region_indices(op.dst, local)
        vi = loops.region_indices(op.value, local)
        vals = [loops.cast(tirx.BufferLoad(vb, vi[:-1] + [vi[-1] + k]), dst.dtype)
                for k in range(lanes)]
        last = di[:-1] + [di[-1] + lanes - 1]
        call = device.add_vec(op.order, tirx.address_of(tirx.BufferLoad(dst, di)), vals)
        return loops.guard(loops.bounds_checks(dst, last, ctx.analyzer), tirx.Evaluate(call))

    nest = loops.loop_nest(groups, at, kind=loops.PARALLEL, prefix="a", analyzer=ctx.analyzer)
    return loops.with_layout(nest, elementwise(groups, ctx.num_threads))


# CPU ---------------------------------------------------------------------------------------
@Atomic.lowering("cpu")
def _atomic_cpu(op: Atomic, ctx: LowerContext) -> tirx.Stmt:
    """Plain loads and stores: the CPU backend runs the blocks of a grid that contains atomics
    one after another (see ``LowerKernelLaunch``), so no update can be lost; memory orders
    have nothing to order."""
    dst = R.buffer_of(op.dst)
    is_region = R.is_region(op.value)
    zero = [tirx.const(0, "int32")]

    def body(indices):
        di = indices[0]
        if is_region:
            vb, vi = R.buffer_of(op.value), indices[1]
            val = loops.cast(tirx.BufferLoad(vb, vi), dst.dtype)
            ok = loops.bounds_checks(vb, vi, ctx.analyzer)
        else:
            val, ok = op.value, []
        old = tirx.BufferLoad(dst, di)
        stmts = []
        if op.prev is not None:  # a vector add's k-th element: the k-th previous value
            pb = R.buffer_of(op.prev)
            at = [di[-1] - R.mins(op.dst)[-1]] if op.lanes > 1 else zero
            stmts.append(tirx.BufferStore(pb, old, at))
            old = tirx.BufferLoad(pb, at)
        if op.kind == "store":
            stmts.append(tirx.BufferStore(dst, val, di))
        elif op.kind != "load":
            stmts.append(tirx.BufferStore(dst, apply(op.kind, old, val), di))
        upd = stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)
        cond = loops.all_of(loops.bounds_checks(dst, di, ctx.analyzer) + ok)
        if cond is None:
            return upd
        # a dropped update's old value reads 0 (see _inside)
        dropped = None if op.prev is None else \
            tirx.BufferStore(pb, tirx.const(0, pb.dtype), at)
        return tirx.IfThenElse(cond, upd, dropped)

    regions = [op.dst, op.value] if is_region else [op.dst]
    nest = loops.element_nest(regions, body, kind=loops.SERIAL, prefix="a",
                              analyzer=ctx.analyzer)
    if op.kind == "load":
        return nest
    return tirx.AttrStmt(tirx.const(0, "int32"), ATOMIC_MARK, tirx.const(1, "int32"), nest)
