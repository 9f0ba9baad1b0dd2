"""Loop-nest and predicate builders used by the element-wise lowerings of tile operators."""

from __future__ import annotations

from typing import Callable, Sequence

from tvm import tirx
from tvm.ir import Range
from tvm.sym import Analyzer
from tvm.tirx.buffer import is_buffer_var

from ..utils.dtype import is_narrow_float

# The loop kind of a ``T.Parallel`` loop: its iterations are independent element-wise work of
# the block, which a target maps onto threads (CUDA) or runs in order (CPU).
PARALLEL = tirx.ForKind.PARALLEL
SERIAL = tirx.ForKind.SERIAL


def dtype_of(e) -> str:
    """The dtype of a scalar expression (a buffer variable's element dtype for buffers)."""
    if isinstance(e, bool):
        return "bool"
    if isinstance(e, int):
        return "int32"
    if isinstance(e, float):
        return "float32"
    if is_buffer_var(e):
        return e.dtype
    return str(e.ty)


def index_dtype(*exprs) -> str:
    for e in exprs:
        if dtype_of(e) == "int64":
            return "int64"
    return "int32"


def loop_nest(
    extents: Sequence,
    body: Callable[[list[tirx.Var]], tirx.Stmt],
    kind=PARALLEL,
    prefix: str = "i",
    analyzer: Analyzer | None = None,
) -> tirx.Stmt:
    """``for v0, v1, ... in <kind>(*extents): body(vars)``; binds the ranges in ``analyzer``."""
    dt = index_dtype(*extents)
    vars_ = [tirx.Var(f"{prefix}{k}", dt) for k in range(len(extents))]
    if analyzer is not None:
        for v, e in zip(vars_, extents):
            analyzer.bind(v, Range.from_min_extent(tirx.const(0, dt), e))
    stmt = body(vars_)
    for v, e in reversed(list(zip(vars_, extents))):
        stmt = tirx.For(v, tirx.const(0, dt), e, kind, stmt)
    return stmt


def bounds_checks(buf, indices: Sequence, analyzer: Analyzer) -> list:
    """The conditions ``0 <= idx < extent`` that ``analyzer`` cannot prove for ``buf``."""
    conds = []
    for idx, ext in zip(indices, buf.shape):
        if not analyzer.can_prove(idx < ext):
            conds.append(idx < ext)
        if not analyzer.can_prove(idx >= 0):
            conds.append(idx >= 0)
    return conds


def all_of(conds: Sequence):
    out = None
    for c in conds:
        out = c if out is None else tirx.And(out, c)
    return out


def guard(conds: Sequence, stmt: tirx.Stmt) -> tirx.Stmt:
    cond = all_of(conds)
    return stmt if cond is None else tirx.IfThenElse(cond, stmt, None)


def cast(value, dtype: str):
    return value if dtype_of(value) == dtype else tirx.Cast(dtype, value)


def region_indices(region, local: Sequence, squeeze: bool = True) -> list:
    """Buffer indices of element ``local`` of ``region``: local coordinates run over the
    region's non-unit dims (all dims when ``squeeze`` is False)."""
    out, k = [], 0
    for r in region.region:
        unit = squeeze and _is_one(r.extent)
        if unit:
            out.append(r.min)
        else:
            out.append(r.min + local[k])
            k += 1
    return out


def element_nest(
    regions: Sequence,
    body: Callable[[list[list]], tirx.Stmt],
    kind=PARALLEL,
    prefix: str = "i",
    analyzer: Analyzer | None = None,
    whole: int | None = None,
) -> tirx.Stmt:
    """A loop nest over the elements of ``regions`` (equal shapes once unit dims are dropped);
    ``body`` gets the buffer indices of the current element in each region.  The nest runs over
    the non-unit dims, or over every dim of ``regions[whole]`` (unit dims included) so that
    the nest has that region's shape, as a fragment layout that partitions it must."""
    from . import region as R

    if whole is None:
        shape = [e for e in R.extents(regions[0]) if not _is_one(e)]
    else:
        shape = R.extents(regions[whole])

    def at(iv):
        local = iv if whole is None else \
            [v for v, e in zip(iv, shape) if not _is_one(e)]
        return body([region_indices(reg, iv, squeeze=False) if k == whole
                     else region_indices(reg, local) for k, reg in enumerate(regions)])

    return loop_nest(shape, at, kind=kind, prefix=prefix, analyzer=analyzer)


def _is_one(e) -> bool:
    return isinstance(e, (int, tirx.IntImm)) and int(e) == 1


def with_layout(nest: tirx.Stmt, layout, vec: int = 1) -> tirx.Stmt:
    """Attach the thread layout (and allowed vector width) that ``LowerParallelLoops`` will
    partition this ``T.Parallel`` nest by."""
    from ..layout import codec

    if not isinstance(nest, tirx.For):
        return nest
    depth, loop = 0, nest
    while isinstance(loop, tirx.For) and loop.kind == PARALLEL:
        depth, loop = depth + 1, loop.body
    if depth < len(layout.shape):
        # a nest over a region's non-unit dims, partitioned like the whole buffer
        layout = _without_unit_dims(layout)
    ann = dict(nest.annotations)
    ann["tl.loop_layout"] = codec.encode(layout)
    if vec > 1:
        ann["tl.vectorize"] = vec
    return tirx.For(nest.loop_var, nest.min, nest.extent, nest.kind, nest.body,
                    nest.thread_binding, ann, nest.step)


def _without_unit_dims(layout):
    """The layout over the buffer's shape without its unit dims (whose digits are all 1)."""
    from ..layout.fragment import Factor, Fragment

    if getattr(layout, "dims", None) is None:
        return layout
    keep = [d for d, e in enumerate(layout.shape)
            if e != 1 or any(x.extent != 1 for x in layout.dims[d])]
    if len(keep) == len(layout.shape):
        return layout
    dims = [[Factor(k, x.extent, x.kind, x.stride) for x in layout.dims[d]]
            for k, d in enumerate(keep)]
    return Fragment.from_factors([layout.shape[d] for d in keep], dims, layout.replicas,
                                 name=layout.name)


def elem_bytes(dtype: str) -> int:
    import tvm

    return max(1, tvm.DataType(dtype).bits // 8)


def max_lanes(dtype: str, max_bytes: int = 16) -> int:
    """The most elements of ``dtype`` one vector access moves: ``max_bytes`` of them, and at
    most 4 of a float8 (or narrower) type, which TVM's CUDA codegen has no wider vectors of."""
    v = max(1, max_bytes // elem_bytes(dtype))
    return min(v, 4) if is_narrow_float(dtype) else v


def vector_width(regions, analyzer: Analyzer, max_bytes: int = 16) -> int:
    """Widest vector (in elements) that every region can move along its last dim: the last
    buffer dim is the region's last non-unit dim and contiguous (stride 1), and extents,
    region starts, the buffer's row length, its other strides and its offset are all
    multiples of it."""
    from . import region as R

    dt = R.buffer_of(regions[0]).dtype
    v = max_lanes(dt, max_bytes)
    for reg in regions:
        buf = R.buffer_of(reg)
        if elem_bytes(buf.dtype) != elem_bytes(dt):
            return 1
        ext = R.extents(reg)
        if not ext or _is_one(ext[-1]):
            return 1
        strides = list(buf.strides or [])
        if strides and not analyzer.can_prove(strides[-1] == 1):
            return 1  # a strided view: consecutive elements are not adjacent in memory
        multiples = [ext[-1], reg.region[-1].min, buf.shape[-1], *strides[:-1]]
        if buf.elem_offset is not None:
            multiples.append(buf.elem_offset)
        while v > 1 and not all(analyzer.can_prove(tirx.floormod(m, v) == 0) for m in multiples):
            v //= 2
    return v


def unflatten(flat, extents: Sequence) -> list:
    """The row-major coordinates, over ``extents``, of the flat index ``flat``."""
    coords, rest = [], flat
    for e in reversed(list(extents)):
        coords.insert(0, tirx.floormod(rest, e))
        rest = tirx.floordiv(rest, e)
    return coords


def over_shared_tiles(op_name: str, tiles: Sequence, shape_region,
                      nest: Callable[[object], tirx.Stmt], num_threads: int) -> tirx.Stmt:
    """CUDA: ``nest(PARALLEL)``, a loop nest over ``shape_region``'s extents, spread over
    ``num_threads`` threads element-wise, for an op whose ``tiles`` must be shared tiles of a
    constant shape (``LoweringError`` naming ``op_name`` otherwise)."""
    from ..errors import LoweringError
    from ..layout.fragment import elementwise
    from . import region as R

    for reg in tiles:
        if R.scope_of(reg) not in ("shared", "shared.dyn"):
            raise LoweringError(f"{op_name} on CUDA works on shared tiles; {R.describe(reg)} is "
                                f"{R.scope_of(reg)!r}")
    ext = [R.as_int(e) for e in R.extents(shape_region)]
    if any(e is None for e in ext):
        raise LoweringError(f"{op_name} on CUDA needs constant extents, got "
                            f"{R.fmt_shape(R.extents(shape_region))}")
    return with_layout(nest(PARALLEL), elementwise(ext, num_threads))
