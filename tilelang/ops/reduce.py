"""``T.reduce_max | min | sum | abssum | absmax``: reduce a tile along one dimension.

``dst`` has ``src``'s shape without dimension ``dim`` (a kept unit dimension is accepted too).
With ``clear=True`` the result replaces ``dst``; with ``clear=False`` it is folded into
``dst``'s existing values with the same operation (``max(dst, max(src))``, ``dst + sum(src)``).
Sums run in ``dst``'s dtype, except for 8-bit (and narrower) floats, which have no arithmetic
of their own: they sum in float32, rounded to ``dst``'s dtype once at the end.  Max/min of
floats narrower than float32 are taken in float32, which gives the same (exact) result.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

from ..device import sm80 as device
from ..errors import LoweringError, TileOpError
from . import loops
from . import region as R
from .base import LayoutContext, LowerContext, TileOp, register

KINDS = ("max", "min", "sum", "abssum", "absmax")


@register
class Reduce(TileOp):
    name = "tl.reduce"
    printer = "reduce"
    fields = ("src", "dst", "kind", "dim", "clear")

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
            return tirx.const(sign * float("inf"), dtype)
        return tirx.max_value(dtype) if sign > 0 else tirx.min_value(dtype)
    return tirx.const(0, dtype)


def accum_dtype(kind: str, dtype: str) -> str:
    """The dtype a reduction of ``kind`` into ``dtype`` computes in."""
    t = tvm.DataType(dtype)
    if t.is_float and t.bits < 32 and (t.bits < 16 or kind in ("max", "min", "absmax")):
        return "float32"
    return str(dtype)


def combine(kind: str, acc, x):
    if kind in ("abssum", "absmax"):
        x = tirx.abs(x)
    if kind in ("max", "absmax"):
        return tirx.max(acc, x)
    if kind == "min":
        return tirx.min(acc, x)
    return acc + x


def _reduce(kind: str, src: Any, dst: Any, dim: int, clear: bool):
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
    return Reduce(src=s, dst=d, kind=kind, dim=dim, clear=bool(clear)).to_call()


def _public_options(kind: str, batch: Any, nan_propagate: Any) -> None:
    """The public signature's tuning arguments: ``batch`` (rows reduced together, a
    scheduling hint that does not change the result) is accepted; ``nan_propagate=True``
    (a NaN operand makes the max/min NaN) is not implemented and is refused."""
    opname = f"T.reduce_{kind}"
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise TileOpError(f"{opname}: batch must be a positive int, got {batch!r}")
    if nan_propagate:
        raise TileOpError(f"{opname}: nan_propagate=True is not supported by this tilelang "
                          f"(max/min follow the default, non-propagating semantics)")


def reduce_max(buffer: Any, out: Any, dim: int = -1, clear: bool = True, batch: int = 1,
               nan_propagate: bool = False):
    """``out = max(buffer, axis=dim)``; ``clear=False`` gives ``max(out, ...)``."""
    _public_options("max", batch, nan_propagate)
    return _reduce("max", buffer, out, dim, clear)


def reduce_min(buffer: Any, out: Any, dim: int = -1, clear: bool = True, batch: int = 1,
               nan_propagate: bool = False):
    """``out = min(buffer, axis=dim)``; ``clear=False`` gives ``min(out, ...)``."""
    _public_options("min", batch, nan_propagate)
    return _reduce("min", buffer, out, dim, clear)


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
    """``out = max(|buffer|, axis=dim)``; ``clear=False`` gives ``max(out, ...)``."""
    _public_options("absmax", batch, nan_propagate)
    return _reduce("absmax", buffer, out, dim, clear)


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


def src_indices(op: Reduce, outer: list, r) -> list:
    full = list(outer[: op.dim]) + [r] + list(outer[op.dim:])
    return [rg.min + v for rg, v in zip(op.src.region, full)]


@Reduce.lowering("cpu")
def _reduce_cpu(op: Reduce, ctx: LowerContext) -> tirx.Stmt:
    """Per kept coordinate: start from the identity (or ``dst``), fold the source line in
    order, store the result."""
    src, dst = R.buffer_of(op.src), R.buffer_of(op.dst)
    at = accum_dtype(op.kind, dst.dtype)
    acc = tirx.decl_buffer([1], at, f"{dst.name}_acc", scope="local")
    n = R.extents(op.src)[op.dim]

    def body(outer):
        di = dst_indices(op, outer)
        start = identity(op.kind, at) if op.clear else \
            loops.cast(tirx.BufferLoad(dst, di), at)
        fold = loops.loop_nest(
            [n],
            lambda rv: tirx.BufferStore(
                acc,
                combine(op.kind, tirx.BufferLoad(acc, [0]),
                        loops.cast(tirx.BufferLoad(src, src_indices(op, outer, rv[0])), at)),
                [0]),
            kind=loops.SERIAL, prefix="r")
        return tirx.SeqStmt([tirx.BufferStore(acc, start, [0]), fold,
                             tirx.BufferStore(dst, loops.cast(tirx.BufferLoad(acc, [0]),
                                                              dst.dtype), di)])

    nest = loops.loop_nest(_kept(op), body, kind=loops.SERIAL, prefix="o")
    return tirx.SeqStmt([tirx.AllocBuffer(acc), nest])


_OP = {"max": "tl::MaxOp", "min": "tl::MinOp", "sum": "tl::SumOp", "abssum": "tl::SumOp",
       "absmax": "tl::MaxOp"}
_FOLD = {"max": "max", "min": "min", "sum": "sum", "abssum": "sum", "absmax": "max"}
_CTYPES = {"float32": "float", "float16": "half", "bfloat16": "__nv_bfloat16", "int32": "int",
           "float64": "double"}


@Reduce.lowering("cuda")
def _reduce_cuda(op: Reduce, ctx: LowerContext) -> tirx.Stmt:
    """Each thread folds its own elements into a register copy of the result row, the threads
    holding parts of a row combine with the device all-reduce (warp shuffles, shared scratch
    and barriers of the op's thread group across warps), and the result replaces or folds
    into ``dst``."""
    from ..layout import codec

    src, dst = R.buffer_of(op.src), R.buffer_of(op.dst)
    if src.scope() != "local.fragment" or dst.scope() != "local.fragment":
        raise LoweringError(f"T.reduce_{op.kind} on CUDA reduces a fragment into a fragment; got "
                            f"{src.name} ({src.scope()}) -> {dst.name} ({dst.scope()})")
    if not (R.same_shape(R.extents(op.src), src.shape) and R.same_shape(R.extents(op.dst), dst.shape)):
        raise LoweringError(f"T.reduce_{op.kind} on CUDA works on whole fragments")
    ls, ld = ctx.layout(src), ctx.layout(dst)
    keep = len(dst.shape) == len(src.shape)
    want = ls.reduce(op.dim, keep_dim=keep)
    if not ld.same_as(want):
        raise LoweringError(
            f"T.reduce_{op.kind}: destination {dst.name} has layout {ld}, but reducing "
            f"{src.name} (layout {ls}) over dim {op.dim} gives {want}")
    dt = accum_dtype(op.kind, dst.dtype)
    tmp = tirx.decl_buffer(list(dst.shape), dt, f"{dst.name}_part", scope="local.fragment")
    dshape = [R.as_int(s) for s in dst.shape]
    sshape = [R.as_int(s) for s in src.shape]
    stmts = [tirx.AllocBuffer(tmp, annotations={"tl.layout": codec.encode(ld)})]
    ctx.layouts[tmp.__chandle__()] = ld

    def drop(iv):
        out = [v for k, v in enumerate(iv) if k != op.dim]
        if keep:
            out.insert(op.dim, tirx.const(0, "int32"))
        return out

    init = loops.loop_nest(dshape, lambda iv: tirx.BufferStore(tmp, identity(op.kind, dt), list(iv)))
    stmts.append(loops.with_layout(init, ld))
    fold = loops.loop_nest(sshape, lambda iv: tirx.BufferStore(
        tmp, combine(op.kind, tirx.BufferLoad(tmp, drop(iv)),
                     loops.cast(tirx.BufferLoad(src, list(iv)), dt)), drop(iv)))
    stmts.append(loops.with_layout(fold, ls))
    factors = _split_at_warp([x for x in ls.reduced_thread_factors(op.dim) if x.extent > 1])
    scratch = None
    if any(x.stride >= 32 for x in factors):
        scratch = tirx.decl_buffer([ctx.num_threads], dt, f"{dst.name}_red", scope="shared.dyn")
        stmts.insert(0, tirx.AllocBuffer(scratch))

    group = ""  # a thread group other than the block: its first thread and its barrier
    if ctx.barriers is not None and ctx.group != ctx.barriers.block:
        group = f", {ctx.group.offset}, {ctx.barriers.of(ctx.group)}"

    def allreduce(iv):
        v = tirx.BufferLoad(tmp, list(iv))
        for x in factors:
            targs = f"{_OP[op.kind]}, {x.extent}, {x.stride}, {ctx.num_threads}"
            if x.stride >= 32:
                v = device.all_reduce(targs + group, v,
                                      tirx.address_of(tirx.BufferLoad(scratch, [0])), dtype=dt)
            else:
                v = device.all_reduce(targs, v, dtype=dt)
        return tirx.BufferStore(tmp, v, list(iv))

    if factors:
        stmts.append(loops.with_layout(loops.loop_nest(dshape, allreduce), ld))

    def finish(iv):
        new = tirx.BufferLoad(tmp, list(iv))
        if not op.clear:
            new = _fold_values(_FOLD[op.kind], loops.cast(tirx.BufferLoad(dst, list(iv)), dt),
                               new)
        return tirx.BufferStore(dst, loops.cast(new, dst.dtype), list(iv))

    stmts.append(loops.with_layout(loops.loop_nest(dshape, finish), ld))
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


def _fold_values(kind: str, a, b):
    if kind == "max":
        return tirx.max(a, b)
    if kind == "min":
        return tirx.min(a, b)
    return a + b
