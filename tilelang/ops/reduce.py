"""``T.reduce_max | min | sum | abssum | absmax``: reduce a tile along one dimension.

``dst`` has ``src``'s shape without dimension ``dim`` (a kept unit dimension is accepted too).
With ``clear=True`` the result replaces ``dst``; with ``clear=False`` it is folded into
``dst``'s existing values with the same operation (``max(dst, max(src))``, ``dst + sum(src)``).
Sums run in ``dst``'s dtype, except for 8-bit (and narrower) floats, which have no arithmetic
of their own: they sum in float32, rounded to ``dst``'s dtype once at the end.  Max/min of
floats narrower than float32 are taken in float32 (on CUDA, float16/bfloat16 in their own
type with ``__hmax``/``__hmin``), which gives the same (exact) result.

NaN: by default a max/min ignores NaN operands (``fmax`` semantics: the result is NaN only when
every value of the line is); with ``nan_propagate=True`` a NaN anywhere in the line (or in
``dst`` with ``clear=False``) makes the result NaN.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

from ..device import sm80 as device
from ..errors import LoweringError, TileOpError
from ..utils.dtype import infinity
from . import loops
from . import region as R
from .base import LayoutContext, LowerContext, TileOp, register

KINDS = ("max", "min", "sum", "abssum", "absmax")


@register
class Reduce(TileOp):
    name = "tl.reduce"
    printer = "reduce"
    fields = ("src", "dst", "kind", "dim", "clear", "nan_propagate")
    writes = ("dst",)
    defaults = {"nan_propagate": 0}

    def propagate_layout(self, ctx: LayoutContext) -> None:
        """A fragment reduced into a fragment gives it its layout with ``dim`` reduced away
        (kept as a unit dim when the destination keeps it)."""
        s, d = R.buffer_of(self.src), R.buffer_of(self.dst)
        if s.scope() == d.scope() == "local.fragment" and ctx.layout(s) is not None:
            keep = len(d.shape) == len(s.shape)
            ctx.demand(d, ctx.layout(s).reduce(self.dim, keep_dim=keep),
                       f"T.reduce_{self.kind}({s.name}, {d.name})")


def identity(kind: str, dtype: str):
    """The value a reduction computing in ``dtype`` (see :func:`accum_dtype`) starts from:
    -inf / +inf for float max / min, the extreme integers for integer ones, 0 for sums."""
    if kind in ("max", "min", "absmax"):
        sign = 1 if kind == "min" else -1
        if tvm.DataType(dtype).is_float:
            return infinity(str(dtype), negative=sign < 0)
        return tirx.max_value(dtype) if sign > 0 else tirx.min_value(dtype)
    return tirx.const(0, dtype)


def accum_dtype(kind: str, dtype: str) -> str:
    """The dtype a reduction of ``kind`` into ``dtype`` computes in."""
    t = tvm.DataType(dtype)
    if t.is_float and t.bits < 32 and (t.bits < 16 or kind in ("max", "min", "absmax")):
        return "float32"
    return str(dtype)


def combine(kind: str, acc, x, extreme=None):
    """``acc`` folded with element ``x``; ``extreme(which, a, b)`` ("max"/"min") gives the
    max/min of two values (default: :func:`cpu_extreme` without NaN propagation)."""
    extreme = extreme or (lambda which, a, b: cpu_extreme(which, a, b, False))
    if kind in ("abssum", "absmax"):
        x = tirx.abs(x)
    if kind in ("max", "absmax"):
        return extreme("max", acc, x)
    if kind == "min":
        return extreme("min", acc, x)
    return acc + x


def _fold_kind(kind: str) -> str:
    """The operation that folds a result into ``dst`` (``clear=False``): abs is not applied."""
    return {"abssum": "sum", "absmax": "max"}.get(kind, kind)


def cpu_extreme(which: str, a, b, propagate: bool):
    """max/min of ``a`` and ``b`` with explicit NaN rules for floats: a NaN operand gives NaN
    (``propagate``) or the other operand (the default, like ``fmax``).  TIR's plain max is a
    compare-and-select, whose NaN result depends on the operand order."""
    plain = tirx.max(a, b) if which == "max" else tirx.min(a, b)
    if not tvm.DataType(str(a.ty)).is_float:
        return plain
    if propagate:
        return tirx.Select(tirx.isnan(a), a, tirx.Select(tirx.isnan(b), b, plain))
    return tirx.Select(tirx.isnan(b), a, tirx.Select(tirx.isnan(a), b, plain))


def _reduce(kind: str, src: Any, dst: Any, dim: int, clear: bool, nan_propagate: bool = False):
    opname = f"T.reduce_{kind}"
    s = R.region_of(src, opname, "source")
    d = R.region_of(dst, opname, "destination")
    ss, ds = R.extents(s), R.extents(d)
    nd = len(ss)
    if not -nd <= dim < nd:
        raise TileOpError(
            f"{opname}: dim={dim} is out of range for source {R.describe(s)} of shape "
            f"{R.fmt_shape(ss)} ({nd} dims)"
        )
    dim = dim % nd
    for role, r in (("source", s), ("destination", d)):
        if str(R.buffer_of(r).dtype) == "bool":
            raise TileOpError(f"{opname}: the {role} {R.describe(r)} is bool, which has no "
                              f"{kind}; reduce an int8 or int32 copy of it (T.copy converts)")
    kept = [e for k, e in enumerate(ss) if k != dim]
    with_unit = [e if k != dim else 1 for k, e in enumerate(ss)]
    if not (R.same_shape(R.squeeze(kept), R.squeeze(ds)) and
            (R.same_shape(kept, ds) or R.same_shape(with_unit, ds) or
             R.same_shape(R.squeeze(kept), ds))):
        raise TileOpError(
            f"{opname}: reducing source {R.describe(s)} of shape {R.fmt_shape(ss)} over dim "
            f"{dim} gives shape {R.fmt_shape(kept)}, but destination {R.describe(d)} has shape "
            f"{R.fmt_shape(ds)}"
        )
    return Reduce(src=s, dst=d, kind=kind, dim=dim, clear=bool(clear),
                  nan_propagate=int(bool(nan_propagate))).to_call()


def _public_options(kind: str, batch: Any, nan_propagate: Any) -> None:
    """The public signature's options: ``batch`` (rows reduced together, a scheduling hint
    that does not change the result) and ``nan_propagate`` (a bool)."""
    opname = f"T.reduce_{kind}"
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise TileOpError(f"{opname}: batch must be a positive int, got {batch!r}")
    if not isinstance(nan_propagate, (bool, int)):
        raise TileOpError(f"{opname}: nan_propagate must be a bool, got {nan_propagate!r}")


def reduce_max(buffer: Any, out: Any, dim: int = -1, clear: bool = True, batch: int = 1,
               nan_propagate: bool = False):
    """``out = max(buffer, axis=dim)``; ``clear=False`` gives ``max(out, ...)``;
    ``nan_propagate=True``: a NaN in the line (or in ``out``) gives NaN."""
    _public_options("max", batch, nan_propagate)
    return _reduce("max", buffer, out, dim, clear, nan_propagate)


def reduce_min(buffer: Any, out: Any, dim: int = -1, clear: bool = True, batch: int = 1,
               nan_propagate: bool = False):
    """``out = min(buffer, axis=dim)``; ``clear=False`` gives ``min(out, ...)``;
    ``nan_propagate=True``: a NaN in the line (or in ``out``) gives NaN."""
    _public_options("min", batch, nan_propagate)
    return _reduce("min", buffer, out, dim, clear, nan_propagate)


def reduce_sum(buffer: Any, out: Any, dim: int = -1, clear: bool = True, batch: int = 1):
    """``out = sum(buffer, axis=dim)``; ``clear=False`` gives ``out + ...``."""
    _public_options("sum", batch, False)
    return _reduce("sum", buffer, out, dim, clear)


def reduce_abssum(buffer: Any, out: Any, dim: int = -1, clear: bool = True, batch: int = 1):
    """``out = sum(|buffer|, axis=dim)``; ``clear=False`` gives ``out + ...``."""
    _public_options("abssum", batch, False)
    return _reduce("abssum", buffer, out, dim, clear)


def reduce_absmax(buffer: Any, out: Any, dim: int = -1, clear: bool = True, batch: int = 1,
                  nan_propagate: bool = False):
    """``out = max(|buffer|, axis=dim)``; ``clear=False`` gives ``max(out, ...)``;
    ``nan_propagate=True``: a NaN in the line (or in ``out``) gives NaN."""
    _public_options("absmax", batch, nan_propagate)
    return _reduce("absmax", buffer, out, dim, clear, nan_propagate)


def dst_indices(op: Reduce, outer: list) -> list:
    """Destination indices for the kept (outer) coordinates of the source."""
    ds = R.extents(op.dst)
    sq_outer = [v for v, e in zip(outer, _kept(op)) if not _unit(e)]
    idx, k = [], 0
    for r, e in zip(op.dst.region, ds):
        if _unit(e):
            idx.append(r.min)
        else:
            idx.append(r.min + sq_outer[k])
            k += 1
    return idx


def _kept(op: Reduce) -> list:
    return [e for k, e in enumerate(R.extents(op.src)) if k != op.dim]


def _unit(e) -> bool:
    return R.as_int(e) == 1


@Reduce.lowering("cpu")
def _reduce_cpu(op: Reduce, ctx: LowerContext) -> tirx.Stmt:
    """Per kept coordinate: start from the identity (or ``dst``), fold the source line in
    order, store the result."""
    dst = R.buffer_of(op.dst)
    at = accum_dtype(op.kind, dst.dtype)
    return _serial_fold(op, at, lambda which, a, b: cpu_extreme(which, a, b,
                                                                bool(op.nan_propagate)))


def _serial_fold(op: Reduce, at: str, extreme, pair=None) -> tirx.Stmt:
    """The reduction as one thread's loops: per kept coordinate, an accumulator of dtype
    ``at`` starts from the identity (or ``dst``), folds the source line in order and is
    stored to ``dst``.  With ``pair`` (a :class:`_Pair`), the innermost source dim is walked
    two elements at a time in one two-lane accumulator (see :func:`_pairs`)."""
    src, dst = R.buffer_of(op.src), R.buffer_of(op.dst)
    sshape = list(R.extents(op.src))
    last = len(sshape) - 1
    lanes = 2 if pair is not None else 1
    acc = tirx.decl_buffer([1], at if lanes == 1 else f"{at}x{lanes}", f"{dst.name}_acc",
                           scope="local")
    n = sshape[op.dim] if op.dim != last else sshape[op.dim] // lanes
    kept = [e if k != last else e // lanes for k, e in enumerate(sshape) if k != op.dim]

    def load(outer, r, lane):
        full = list(outer[: op.dim]) + [r] + list(outer[op.dim:])
        full[last] = full[last] * lanes + lane
        return loops.cast(tirx.BufferLoad(src, [rg.min + v for rg, v in
                                                zip(op.src.region, full)]), at)

    def store(outer, lane, value):
        """``dst`` at the kept coordinate ``outer`` (its innermost one widened by ``lane``
        when the pairs run along a kept dim), folded with the old value if not clearing."""
        if lanes > 1 and op.dim != last:
            outer = list(outer[:-1]) + [outer[-1] * lanes + lane]
        di = dst_indices(op, outer)
        if not op.clear:
            value = combine(_fold_kind(op.kind), loops.cast(tirx.BufferLoad(dst, di), at),
                            value, extreme)
        return tirx.BufferStore(dst, loops.cast(value, dst.dtype), di)

    def body(outer):
        a = tirx.BufferLoad(acc, [0])
        if lanes == 1:
            start = identity(op.kind, at) if op.clear else \
                loops.cast(tirx.BufferLoad(dst, dst_indices(op, outer)), at)
            step = lambda rv: combine(op.kind, a, load(outer, rv[0], 0), extreme)  # noqa: E731
            finish = [tirx.BufferStore(dst, loops.cast(a, dst.dtype), dst_indices(op, outer))]
        else:
            start = tirx.Broadcast(identity(op.kind, at), lanes)
            step = lambda rv: pair.fold(a, tirx.Shuffle(  # noqa: E731
                [load(outer, rv[0], k) for k in range(lanes)],
                [tirx.const(k, "int32") for k in range(lanes)]))
            halves = [tirx.Shuffle([a], [tirx.const(k, "int32")]) for k in range(lanes)]
            if op.dim == last:  # both lanes hold partial results of one line
                finish = [store(outer, 0, combine(_fold_kind(op.kind), halves[0], halves[1],
                                                  extreme))]
            else:  # each lane holds the result of its own line
                finish = [store(outer, k, h) for k, h in enumerate(halves)]
        fold = loops.loop_nest([n], lambda rv: tirx.BufferStore(acc, step(rv), [0])
                               if lanes == 1 else step(rv), kind=loops.SERIAL, prefix="r")
        return tirx.SeqStmt([tirx.BufferStore(acc, start, [0]), fold, *finish])

    nest = loops.loop_nest(kept, body, kind=loops.SERIAL, prefix="o")
    return tirx.SeqStmt([tirx.AllocBuffer(acc), nest])


_OP = {"max": "tl::MaxOp", "min": "tl::MinOp", "sum": "tl::SumOp", "abssum": "tl::SumOp",
       "absmax": "tl::MaxOp"}
_NATIVE_16 = ("float16", "bfloat16")  # max/min on CUDA in their own type (__hmax, __hmin)
_SCOPES = ("local.fragment", "shared", "shared.dyn")


def cuda_accum_dtype(kind: str, dtype: str) -> str:
    """:func:`accum_dtype` on CUDA: max/min of float16/bfloat16 stay in their type (exact)."""
    if kind in ("max", "min", "absmax") and str(dtype) in _NATIVE_16:
        return str(dtype)
    return accum_dtype(kind, dtype)


def cuda_extreme(propagate: bool):
    """max/min of two CUDA values: ``__hmax``/``__hmin`` (``_nan`` forms to propagate) for
    16-bit floats, ``tl::max_nan``/``min_nan`` for other floats that propagate, else TIR's
    max/min (CUDA's ``fmaxf``/``fminf``, which ignore a NaN operand)."""
    def extreme(which: str, a, b):
        dt = str(a.ty)
        if dt in _NATIVE_16:
            return tirx.call_extern(dt, f"__h{which}" + ("_nan" if propagate else ""), a, b)
        if propagate and tvm.DataType(dt).is_float:
            return tirx.call_extern(dt, f"tl::{which}_nan", a, b)
        return tirx.max(a, b) if which == "max" else tirx.min(a, b)

    return extreme


def _combiner(kind: str, dtype: str, propagate: bool) -> str:
    """The ``tl::*Op`` the device all-reduce combines values of ``dtype`` with."""
    name = _OP[kind]
    if propagate and name != "tl::SumOp" and tvm.DataType(dtype).is_float:
        name += "Nan"
    return name


def _expand(ld, dim: int, n: int, keep: bool):
    """A source layout whose reduction over ``dim`` is ``ld``: every thread holding an element
    of ``ld`` holds the whole line of ``n`` elements along ``dim`` in registers (the reduction
    is then thread-local)."""
    from ..layout.fragment import REG, Factor, Fragment

    dims = [fs for k, fs in enumerate(ld.dims) if not (keep and k == dim)]
    reg_top = max([x.stride * x.extent for x in ld.factors if x.kind == REG] or [1])
    out, shape = [], []
    for d in range(len(dims) + 1):
        if d == dim:
            out.append([Factor(d, n, REG, reg_top)])
            shape.append(n)
            continue
        k = d if d < dim else d - 1
        out.append([Factor(d, x.extent, x.kind, x.stride) for x in dims[k]])
        shape.append([s for j, s in enumerate(ld.shape) if not (keep and j == dim)][k])
    return Fragment.from_factors(shape, out, ld.replicas, name=f"expand({ld.name}, {dim})")


def _check_line_threads(op: Reduce, ls, src) -> None:
    """The device all-reduce halves its lane distance each step: the threads holding one line
    of the source along ``dim`` (replicas included) must be a power of two."""
    import numpy as np

    table = ls.thread_table()  # replica 0
    line = np.unique(table[tuple(slice(None) if k == op.dim else 0 for k in range(table.ndim))])
    width = len(line) * ls.replicate
    if width < 1 or width & (width - 1):
        raise LoweringError(
            f"T.reduce_{op.kind}({src.name}, dim={op.dim}) on CUDA: the all-reduce runs over the "
            f"threads that hold a line of {src.name} along dim {op.dim}, and their number "
            f"(logical_width = {width}: {len(line)} threads x {ls.replicate} copies) must be a "
            f"positive power of two; {src.name} has layout {ls} (pad dim {op.dim} or the thread "
            f"count to a power of two)")


_THREAD_LOCAL = ("local", "local.var")
_PAIR_OPS = {"sum": "add2", "abssum": "add2", "max": "max2", "absmax": "max2", "min": "min2"}


class _Pair:
    """Two-lane folding of 16-bit floats on CUDA (``tl.device.fold_pair``): ``add2``,
    ``max2``, ``min2`` (``_nan`` forms to propagate NaN), of ``|x|`` for the abs kinds."""

    def __init__(self, kind: str, propagate: bool):
        fn = _PAIR_OPS[kind]
        self.fn = fn + "_nan" if propagate and fn != "add2" else fn
        self.absolute = kind in ("abssum", "absmax")

    def fold(self, acc, x) -> tirx.Stmt:
        """``acc = fn(acc, x)``: ``acc`` is the accumulator element (a ``BufferLoad``)."""
        from ..device.pair_fold import fold_pair

        return tirx.Evaluate(fold_pair(self.fn, acc, x, self.absolute))


def _pairs(op: Reduce, dt: str) -> _Pair | None:
    """The two-lane fold for a per-thread reduction, or ``None`` (fold one element at a
    time): the source and the accumulator are the same 16-bit float and the innermost
    source dim has a constant even extent, so it is walked in pairs of neighbours (pairs of
    the reduced line when it is the reduced dim, else pairs of neighbouring lines)."""
    src = R.buffer_of(op.src)
    inner = R.as_int(R.extents(op.src)[-1])
    if dt not in _NATIVE_16 or str(src.dtype) != dt or inner is None or inner % 2:
        return None
    return _Pair(op.kind, bool(op.nan_propagate))


def _is_thread_local(op: Reduce, ctx: LowerContext) -> bool:
    return R.buffer_of(op.src).scope() in _THREAD_LOCAL


@Reduce.lowering("cuda", when=_is_thread_local)
def _reduce_cuda_thread_local(op: Reduce, ctx: LowerContext) -> tirx.Stmt:
    """A per-thread source (``T.alloc_local`` / ``T.alloc_var``): every thread reduces its own
    elements in registers, serially, into its own per-thread destination; no thread talks to
    another.  16-bit floats fold two elements per instruction (:func:`_pairs`)."""
    src, dst = R.buffer_of(op.src), R.buffer_of(op.dst)
    if dst.scope() not in _THREAD_LOCAL:
        raise LoweringError(
            f"T.reduce_{op.kind}({src.name}, {dst.name}) on CUDA: source {src.name} is "
            f"per-thread ({src.scope()}), so each thread reduces its own elements and the "
            f"destination must be per-thread too (T.alloc_local / T.alloc_var); {dst.name} is "
            f"in {dst.scope()}")
    dt = cuda_accum_dtype(op.kind, dst.dtype)
    return _serial_fold(op, dt, cuda_extreme(bool(op.nan_propagate)), _pairs(op, dt))


@Reduce.lowering("cuda")
def _reduce_cuda(op: Reduce, ctx: LowerContext) -> tirx.Stmt:
    """Each thread folds its own elements into a register copy of the result row, the threads
    holding parts of a row combine with the device all-reduce (warp shuffles, shared scratch
    and barriers of the op's thread group across warps), and the result replaces or folds
    into ``dst``.  A shared source is read in place, each thread folding whole lines into a
    result laid out like ``dst`` (a fragment) or spread over the threads (shared); a shared
    destination is written by one copy of each result element."""
    from ..layout import codec
    from ..layout.fragment import elementwise

    src, dst = R.buffer_of(op.src), R.buffer_of(op.dst)
    name = f"T.reduce_{op.kind}"
    for b, what in ((src, "source"), (dst, "destination")):
        if b.scope() not in _SCOPES:
            raise LoweringError(f"{name} on CUDA reduces a fragment or shared tile into a "
                                f"fragment or shared tile (or a per-thread local buffer into "
                                f"a per-thread one); {what} {b.name} is in {b.scope()}")
    src_frag, dst_frag = src.scope() == "local.fragment", dst.scope() == "local.fragment"
    if (src_frag and not R.same_shape(R.extents(op.src), src.shape)) or \
            (dst_frag and not R.same_shape(R.extents(op.dst), dst.shape)):
        raise LoweringError(f"{name} on CUDA works on whole fragments (a region of a shared "
                            f"tile is accepted)")
    sshape = [R.as_int(e) for e in R.extents(op.src)]
    keep = dst_frag and len(dst.shape) == len(sshape)
    tshape = [e for k, e in enumerate(sshape) if k != op.dim]  # the result, kept dims
    if keep:
        tshape.insert(op.dim, 1)
    if src_frag:
        ls = ctx.layout(src)
        ld = ls.reduce(op.dim, keep_dim=keep)
        if dst_frag and not ctx.layout(dst).same_as(ld):
            raise LoweringError(
                f"{name}: destination {dst.name} has layout {ctx.layout(dst)}, but reducing "
                f"{src.name} (layout {ls}) over dim {op.dim} gives {ld}")
    else:
        ld = ctx.layout(dst) if dst_frag else elementwise(tshape, ctx.num_threads)
        ls = _expand(ld, op.dim, sshape[op.dim], keep)
    _check_line_threads(op, ls, src)
    dt = cuda_accum_dtype(op.kind, dst.dtype)
    extreme = cuda_extreme(bool(op.nan_propagate))
    tmp = tirx.decl_buffer(tshape, dt, f"{dst.name}_part", scope="local.fragment")
    stmts = [tirx.AllocBuffer(tmp, annotations={"tl.layout": codec.encode(ld)})]
    ctx.layouts[tmp.__chandle__()] = ld

    def drop(iv):
        out = [v for k, v in enumerate(iv) if k != op.dim]
        if keep:
            out.insert(op.dim, tirx.const(0, "int32"))
        return out

    init = loops.loop_nest(tshape, lambda iv: tirx.BufferStore(tmp, identity(op.kind, dt),
                                                               list(iv)))
    stmts.append(loops.with_layout(init, ld))
    fold = loops.loop_nest(sshape, lambda iv: tirx.BufferStore(
        tmp, combine(op.kind, tirx.BufferLoad(tmp, drop(iv)),
                     loops.cast(tirx.BufferLoad(src, [rg.min + v for rg, v in
                                                      zip(op.src.region, iv)]), dt),
                     extreme), drop(iv)))
    stmts.append(loops.with_layout(fold, ls))
    factors = _split_at_warp([x for x in ls.reduced_thread_factors(op.dim) if x.extent > 1])
    scratch = None
    if any(x.stride >= 32 for x in factors):
        scratch = tirx.decl_buffer([ctx.num_threads], dt, f"{dst.name}_red", scope="shared.dyn")
        stmts.insert(0, tirx.AllocBuffer(scratch))

    group = ""  # a thread group other than the block: its first thread and its barrier
    if ctx.barriers is not None and ctx.group != ctx.barriers.block:
        group = f", {ctx.group.offset}, {ctx.barriers.of(ctx.group)}"
    combiner = _combiner(op.kind, dt, bool(op.nan_propagate))

    def allreduce(iv):
        v = tirx.BufferLoad(tmp, list(iv))
        for x in factors:
            targs = f"{combiner}, {x.extent}, {x.stride}, {ctx.num_threads}"
            if x.stride >= 32:
                v = device.all_reduce(targs + group, v,
                                      tirx.address_of(tirx.BufferLoad(scratch, [0])), dtype=dt)
            else:
                v = device.all_reduce(targs, v, dtype=dt)
        return tirx.BufferStore(tmp, v, list(iv))

    if factors:
        stmts.append(loops.with_layout(loops.loop_nest(tshape, allreduce), ld))

    def finish(iv):
        new = tirx.BufferLoad(tmp, list(iv))
        di = list(iv) if dst_frag else dst_indices(op, list(iv))
        if not op.clear:
            new = combine(_fold_kind(op.kind), loops.cast(tirx.BufferLoad(dst, di), dt), new,
                          extreme)
        return tirx.BufferStore(dst, loops.cast(new, dst.dtype), di)

    stmts.append(loops.with_layout(loops.loop_nest(tshape, finish), ld))
    return tirx.SeqStmt(stmts)


def _split_at_warp(factors: list) -> list:
    """Thread digits as (extent, stride) pairs that lie wholly inside or above a warp."""
    from ..layout.fragment import THREAD, Factor

    out = []
    for x in factors:
        if x.stride < 32 < x.stride * x.extent:
            inside = 32 // x.stride
            out.append(Factor(x.dim, inside, THREAD, x.stride))
            out.append(Factor(x.dim, x.extent // inside, THREAD, 32))
        else:
            out.append(x)
    return out
