"""``T.copy``: move a region between any two of global, shared, fragment and local memory.

Semantics (every target): the element at local coordinate ``c`` of the source region goes to
local coordinate ``c`` of the destination region, the two regions having the same shape once
unit dimensions are dropped; values are converted to the destination dtype.  An element index
on one side stands for the region of the other side's shape starting there (see
``region.fit_extents``: dimension by dimension when the ranks agree).  Source elements
outside their buffer read as zero (or as the value ``T.annotate_safe_value`` gives the source
buffer where the copy stands), destination elements outside their buffer are not written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import tvm
from tvm import tirx

from ..device import sm80 as device
from ..device import tma
from ..errors import LoweringError, TileOpError
from . import loops
from . import region as R
from .base import LayoutContext, LowerContext, TileOp, register

log = logging.getLogger("tilelang")
FRAGMENT, LOCAL = "local.fragment", ("local", "local.var")


@register
class Copy(TileOp):
    name = "tl.copy"
    printer = "copy"
    fields = ("src", "dst", "coalesced_width", "disable_tma", "eviction_policy", "oob_value")
    writes = ("dst",)
    # what source elements outside their buffer read as: 0, or the T.annotate_safe_value of
    # the source buffer in scope (set by tilelang.transform.safe_values)
    defaults = {"oob_value": None}

    def fill_value(self, dtype: str):
        """The value an out-of-bounds source element gives, as ``dtype``."""
        v = self.oob_value
        if v is None:
            return tirx.const(0, dtype)
        return loops.cast(v if isinstance(v, tvm.ir.Expr) else tirx.const(v, dtype), dtype)

    def shape(self) -> list:
        return R.squeeze(R.extents(self.dst))

    def propagate_layout(self, ctx: LayoutContext) -> None:
        """Two fragments of one shape copied into each other share a layout."""
        s, d = R.buffer_of(self.src), R.buffer_of(self.dst)
        if s.scope() == FRAGMENT and d.scope() == FRAGMENT and R.same_shape(s.shape, d.shape):
            if ctx.layout(s) is not None:
                ctx.demand(d, ctx.layout(s), f"T.copy({s.name}, {d.name})")
            elif ctx.layout(d) is not None:
                ctx.demand(s, ctx.layout(d), f"T.copy({s.name}, {d.name})")


def copy(
    src: Any,
    dst: Any,
    coalesced_width: int | None = None,
    disable_tma: bool = False,
    eviction_policy: str | None = None,
    annotations: dict | None = None,
    prefer_async: bool = False,
):
    """Copy ``src`` to ``dst`` (buffers, slices, or element indices meaning "the region of
    the other side's shape starting here"; two element indices copy that one element).  ``coalesced_width`` bounds the vector width of
    the generated accesses, ``disable_tma`` keeps a Hopper copy off the TMA unit and
    ``eviction_policy`` (``"evict_first"``, ``"evict_last"``) is an L2 hint;
    ``annotations`` and ``prefer_async`` are scheduling hints (``tilelang.ops.hints``)."""
    from .hints import check_hints

    check_hints("T.copy", annotations, prefer_async)
    if R.is_element(src) and R.is_element(dst):  # one element each: a one-element copy
        s = R.region_of(src, "T.copy", "source")
        d = R.region_of(dst, "T.copy", "destination")
    elif R.is_element(src):
        d = R.region_of(dst, "T.copy", "destination")
        s = R.region_of(src, "T.copy", "source", like_shape=R.extents(d))
    else:
        s = R.region_of(src, "T.copy", "source")
        d = R.region_of(dst, "T.copy", "destination", like_shape=R.extents(s))
    ss, ds = R.squeeze(R.extents(s)), R.squeeze(R.extents(d))
    if not R.same_shape(ss, ds):
        raise TileOpError(
            f"T.copy: source {R.describe(s)} has shape {R.fmt_shape(R.extents(s))} but "
            f"destination {R.describe(d)} has shape {R.fmt_shape(R.extents(d))} "
            f"({R.fmt_shape(ss)} vs {R.fmt_shape(ds)} without unit dims)"
        )
    if eviction_policy not in (None, "evict_normal", "evict_first", "evict_last"):
        raise TileOpError(f"T.copy: unknown eviction_policy {eviction_policy!r}")
    return Copy(
        src=s,
        dst=d,
        coalesced_width=int(coalesced_width or 0),
        disable_tma=bool(disable_tma),
        eviction_policy=eviction_policy or "",
    ).to_call()


def elementwise_copy(op: Copy, ctx: LowerContext, kind=loops.PARALLEL,
                     whole: int | None = None) -> tirx.Stmt:
    """The copy as a ``T.Parallel`` nest of guarded element moves (reference lowering); the
    nest has the shape of the source (``whole=0``) or destination (``whole=1``) region, unit
    dims included, when given, else of the regions' non-unit dims."""
    src_buf, dst_buf = R.buffer_of(op.src), R.buffer_of(op.dst)
    a = ctx.analyzer

    def body(indices):
        si, di = indices
        value = loops.cast(tirx.BufferLoad(src_buf, si), dst_buf.dtype)
        src_ok = loops.all_of(loops.bounds_checks(src_buf, si, a))
        if src_ok is not None:
            value = tirx.if_then_else(src_ok, value, op.fill_value(dst_buf.dtype))
        return loops.guard(loops.bounds_checks(dst_buf, di, a), tirx.BufferStore(dst_buf, value, di))

    if ctx.in_parallel and _one_element(op):  # the element of the enclosing T.Parallel loop
        return body((list(R.mins(op.src)), list(R.mins(op.dst))))
    return loops.element_nest([op.src, op.dst], body, kind=kind, prefix="c", analyzer=a,
                              whole=whole)


def _one_element(op: Copy) -> bool:
    return all(R.as_int(e) == 1 for e in list(R.extents(op.src)) + list(R.extents(op.dst)))


def _copy_cuda(op: Copy, ctx: LowerContext) -> tirx.Stmt:
    """Fragments move by their own layout; local arrays copy per thread; global/shared tiles
    move in coalesced 16-byte vectors (``cp.async`` when a pipelined loop issues the copy)."""
    s_scope, d_scope = R.scope_of(op.src), R.scope_of(op.dst)
    if _sync_load(op, ctx) and tma_enabled(ctx.target, ctx.config, op) and \
            log.isEnabledFor(logging.DEBUG):
        log.debug("T.copy %s -> %s: no TMA (%s); using vector copies", R.describe(op.src),
                  R.describe(op.dst), _tma_plan_of(op, ctx))
    if s_scope in LOCAL or d_scope in LOCAL or (ctx.in_parallel and _one_element(op)):
        return elementwise_copy(op, ctx, kind=loops.SERIAL)
    frag = op.src if s_scope == FRAGMENT else op.dst if d_scope == FRAGMENT else None
    if frag is not None:
        buf = R.buffer_of(frag)
        if not R.same_shape(R.extents(frag), buf.shape):
            raise LoweringError(f"T.copy: on CUDA a fragment ({buf.name}) is copied whole, not as "
                                f"the slice {R.describe(frag)}")
        # the nest has the fragment's shape (unit dims too) so that its layout partitions it
        whole = 0 if frag is op.src else 1
        # each side in its own vectors (a cast between them converts element-wise: float32
        # registers stored as half2)
        vec = _capped(op, min(loops.vector_width([r], ctx.analyzer, max_bytes=16)
                              for r in (op.src, op.dst)))
        return loops.with_layout(elementwise_copy(op, ctx, whole=whole), ctx.layout(buf), vec)
    vec = _capped(op, _vector_width(op, ctx))
    shape = [R.as_int(e) for e in op.shape()]
    # a single element: a one-element nest over the destination's (unit) dims
    whole = None if shape else 1
    if not shape:
        shape = [R.as_int(e) for e in R.extents(op.dst)]
    if any(e is None for e in shape):
        raise LoweringError(f"T.copy: tile {R.describe(op.dst)} needs a static shape on CUDA")
    converts = R.buffer_of(op.src).dtype != R.buffer_of(op.dst).dtype  # cp.async moves bytes
    if ctx.async_copy and not converts and s_scope == "global" and d_scope.startswith("shared") \
            and op.oob_value is None:  # cp.async fills with zeros
        nbytes = vec * loops.elem_bytes(R.buffer_of(op.dst).dtype)
        if nbytes in (4, 8, 16):
            return _cp_async(op, ctx, shape, vec, nbytes)
    from ..layout.fragment import elementwise

    return loops.with_layout(elementwise_copy(op, ctx, whole=whole),
                             elementwise(shape, ctx.num_threads, vec), vec)


def _vector_width(op: Copy, ctx: LowerContext) -> int:
    """The vector width of a copy between global/shared tiles: a copy converting element types
    with a paired conversion (``tilelang.device.casts``) moves each side in its own vectors and
    converts them a pair of lanes at a time; other copies move vectors both sides share."""
    from ..device.casts import pair_conversion

    src, dst = R.buffer_of(op.src).dtype, R.buffer_of(op.dst).dtype
    if src != dst and pair_conversion(src, dst, ctx.target):
        return min(loops.vector_width([r], ctx.analyzer) for r in (op.src, op.dst))
    return loops.vector_width([op.src, op.dst], ctx.analyzer)


def _capped(op: Copy, vec: int) -> int:
    """``coalesced_width`` (elements), when given, bounds the vector width."""
    w = int(op.coalesced_width or 0)
    while w > 0 and vec > w:
        vec //= 2
    return max(1, vec)


def _cp_async(op: Copy, ctx: LowerContext, shape, vec: int, nbytes: int) -> tirx.Stmt:
    """One ``cp.async`` of ``vec`` elements per (thread, register); rows or vectors outside
    the source read as zeros."""
    from ..layout.fragment import elementwise

    src_buf, dst_buf = R.buffer_of(op.src), R.buffer_of(op.dst)
    chunks = shape[:-1] + [shape[-1] // vec]

    def body(iv):
        lv = iv[:-1] + [iv[-1] * vec]
        si = loops.region_indices(op.src, lv)
        di = loops.region_indices(op.dst, lv)
        ok = loops.all_of(loops.bounds_checks(src_buf, si, ctx.analyzer))
        call = device.cp_async(
            tirx.address_of(tirx.BufferLoad(dst_buf, di)),
            tirx.address_of(tirx.BufferLoad(src_buf, si)), nbytes,
            ok if ok is not None else tirx.const(True, "bool"))
        return tirx.Evaluate(call)

    nest = loops.loop_nest(chunks, body, kind=loops.PARALLEL, prefix="c", analyzer=ctx.analyzer)
    return loops.with_layout(nest, elementwise(chunks, ctx.num_threads, 1))


# TMA (sm_90a) -----------------------------------------------------------------------------
SWIZZLE_CODE = {0: 0, 32: 1, 64: 2, 128: 3}  # CUtensorMapSwizzle
TMA_SMEM_ALIGN = 128  # bytes: a TMA box's shared-memory address (CUDA programming guide)
TENSOR_MAP = "tl.tensor_map"  # AttrStmt(tensor-map var, TENSOR_MAP, encode call): host encodes
KERNEL_VAR = "tl.kernel_var"  # AllocBuffer annotation: a per-thread variable of the whole kernel
MBARRIER = "tl.mbarrier"  # AllocBuffer annotation: arrive counts of a barrier array


@dataclass(frozen=True)
class TmaPlan:
    """One global -> shared copy as TMA boxes.  Lists are innermost dimension first (CUDA's
    order): ``dims``/``strides`` (bytes, dims 1..) of the global tensor, ``box`` of one load,
    ``coords`` of the first box; the tile is ``panels`` boxes side by side along the innermost
    dim, box ``p`` at coordinate ``coords[0] + p * box[0]`` and at element ``p * panel_elems``
    of the tile.  ``nbytes``: the bytes all boxes bring (out-of-range parts included)."""

    dims: tuple
    strides: tuple
    box: tuple
    coords: tuple
    swizzle: int
    panels: int
    panel_elems: int
    nbytes: int
    bands: int = 1  # boxes stacked along dim ``band_dim`` (the rows) in every panel
    band_dim: int = 1


def tma_enabled(target, config: dict, op: Copy | None = None) -> bool:
    """Whether copies for ``target`` may use TMA: sm_90 or newer, not turned off by the pass
    config ``tl.disable_tma_lower`` or ``T.copy(..., disable_tma=True)``."""
    if target is None or target.kind.name != "cuda":
        return False
    arch = str(target.attrs.get("arch", ""))
    digits = "".join(c for c in arch[3:] if c.isdigit())
    if not digits or int(digits) < 90:
        return False
    if bool(config.get("tl.disable_tma_lower", False)):
        return False
    # TMA fills out-of-range boxes with zeros only
    return not (op is not None and (op.disable_tma or op.oob_value is not None))


def _tile_swizzle(buf, annotations) -> tuple[int | None, int | None]:
    """(swizzle bytes, panel elements) of the shared tile's layout; ``None`` bytes: its layout
    is nothing TMA can write (a custom index map, an sm80 swizzle of a row TMA cannot
    produce)."""
    from ..layout import codec
    from ..layout.swizzle import can_swizzle, make_swizzled_layout

    row = int(buf.shape[-1])
    if "tl.shared_layout" in annotations:
        lay = codec.decode(annotations["tl.shared_layout"])
    elif "tl.swizzle" in annotations and len(buf.shape) >= 2 and can_swizzle(row, buf.dtype):
        lay = make_swizzled_layout(buf)
    else:
        return 0, row
    return getattr(lay, "swizzle_bytes", None), int(getattr(lay, "panel", row))


def _byte_strides(src) -> list:
    """The byte strides of ``src``'s dimensions but the innermost, innermost first."""
    strides, acc = [], tirx.const(loops.elem_bytes(src.dtype), "int64")
    for d in reversed(src.shape[1:]):
        acc = acc * tirx.Cast("int64", d)
        strides.append(acc)
    return strides


def tma_geometry_problem(op: Copy, kernel_addressed: frozenset = frozenset(),
                         issuer_indices: bool = False) -> "str | None":
    """Why no TMA move, on any target, can do the global -> shared copy ``op`` (its types, its
    tensor's shape and strides, the part of the shared tile it covers), or None.  ``op`` is a
    store's geometry too (:func:`_load_geometry`)."""
    src, dst = R.buffer_of(op.src), R.buffer_of(op.dst)
    if R.scope_of(op.src) != "global" or not R.scope_of(op.dst).startswith("shared"):
        return "not a global -> shared copy"
    if src.dtype != dst.dtype:
        return (f"{src.name} is {src.dtype} and the shared tile {dst.name} {dst.dtype}; TMA "
                "moves bytes, it does not convert")
    if src.__chandle__() in kernel_addressed:
        return (f"{src.name}'s address is computed in the kernel; a tensor map is encoded on "
                "the host before the launch")
    eb = loops.elem_bytes(src.dtype)
    if tvm.DataType(src.dtype).bits % 8 or eb > 8:
        return f"element type {src.dtype} has no TMA data type"
    rank = len(src.shape)
    if not 1 <= rank <= 5:
        return f"{src.name} has rank {rank}; TMA takes 1 to 5"
    if any(R.as_int(d) == 0 for d in src.shape):
        return f"{src.name} has a dimension of size 0, which a tensor map cannot describe"
    if src.strides or (src.elem_offset is not None and not _is_zero(src.elem_offset)):
        return f"{src.name} is a strided or offset view"
    ext = [R.as_int(e) for e in R.extents(op.src)]
    dext = [R.as_int(e) for e in R.extents(op.dst)]
    if any(e is None for e in ext + dext):
        return "the tile has a dynamic shape"
    if not issuer_indices and any(_depends_on_data(m) for m in R.mins(op.src)):
        return "the source index depends on loaded data"
    # the shared side (``op.dst``; a store's source) must be the whole tile (leading unit
    # dims: a stage of a staged tile)
    dshape = [int(x) for x in dst.shape]
    lead = 0
    while lead < len(dext) and dext[lead] == 1 and dshape[lead] != 1:
        lead += 1
    if dext[lead:] != dshape[lead:] or not all(_is_zero(m) for m in R.mins(op.dst)[lead:]):
        return (f"the shared side is a part of {dst.name}, not the whole tile (a TMA box "
                "covers a whole shared tile or stage)")
    if R.squeeze(ext) != R.squeeze(dext[lead:]) or ext[-1] != dshape[-1]:
        return "source and destination rows differ"
    an = tvm.sym.Analyzer()
    for st in _byte_strides(src):
        if not an.can_prove(tirx.floormod(st, 16) == 0):
            return (f"a row stride of {src.name} ({an.simplify(st)} bytes) is not a proven "
                    "multiple of 16 bytes")
    return None


def tma_plan(op: Copy, target, config: dict, dst_annotations,
             kernel_addressed: frozenset = frozenset(),
             issuer_indices: bool = False,
             kernel_written: frozenset = frozenset()) -> "TmaPlan | str":
    """The TMA boxes of a global -> shared copy, or why TMA does not suit it (the caller
    falls back to cp.async/vector copies).  Depends only on the op, the buffers, the target,
    the pass configs, the destination tile's layout annotations, the tensors whose address
    the kernel computes (``tilelang.language.pointer.kernel_addressed``) and those it writes
    (``tilelang.jit.effects.written_tensors``), so every pass that asks gets the same answer.
    ``issuer_indices``: the coordinates are those the issuing thread computes
    (``T.tma_copy``), so they may depend on loaded data."""
    if not tma_enabled(target, config, op):
        return "TMA is off (target below sm_90, tl.disable_tma_lower or disable_tma=True)"
    src = R.buffer_of(op.src)
    if src.__chandle__() in kernel_written:
        # the threads' writes go through the generic proxy, a TMA load reads through the
        # async one, and a warp-specialized producer would not wait for the writers at all
        return (f"the kernel also writes {src.name}; a TMA load would not be ordered after "
                "those writes")
    problem = tma_geometry_problem(op, kernel_addressed, issuer_indices)
    if problem is not None:
        return problem
    src, dst = R.buffer_of(op.src), R.buffer_of(op.dst)
    eb = loops.elem_bytes(src.dtype)
    ext = [R.as_int(e) for e in R.extents(op.src)]
    strides = _byte_strides(src)
    sw, panel = _tile_swizzle(dst, dst_annotations)
    if sw is None:
        return f"{dst.name}'s layout is not one TMA can write (no swizzle_bytes)"
    box = list(reversed(ext))
    panels = 1
    if panel != box[0]:
        if box[0] % panel:
            return "the tile's panels do not divide its rows"
        panels, box[0] = box[0] // panel, panel
    if panels > 1 and sum(b > 1 for b in box[1:]) > 1:
        # a box lands contiguously, slice after slice; the layout keeps a slice's panels
        # together
        return ("the tile stacks several 2-D slices of several swizzle panels each, which "
                "one box per panel cannot write")
    if box[0] * eb % 16:
        return f"the tile's rows are {box[0] * eb} bytes, not a multiple of 16"
    if sw and box[0] * eb > sw:
        return f"the tile's rows ({box[0] * eb} bytes) exceed the {sw}-byte swizzle span"
    if box[0] > 256 and panels == 1 and not sw and all(b == 1 for b in box[1:]):
        # one contiguous run: boxes of at most 256 elements side by side
        k = next((k for k in range(2, box[0] + 1) if box[0] % k == 0 and box[0] // k <= 256
                  and box[0] // k * eb % TMA_SMEM_ALIGN == 0), None)
        if k is not None:
            panels, box[0] = k, box[0] // k
    if any(b > 256 for b in box):
        return f"box {box} has a dimension above 256"
    tile_bytes = _prod(dst.shape) * loops.elem_bytes(dst.dtype)
    if tile_bytes % TMA_SMEM_ALIGN or (panels > 1 and
                                       box[0] * _prod(box[1:]) * eb % TMA_SMEM_ALIGN):
        # a box lands at a shared address TMA needs 128-byte aligned: a stage of the tile
        # (the pipeline stacks them) or a panel would start off that alignment
        return (f"{dst.name} ({tile_bytes} bytes) or its boxes do not start at multiples of "
                f"{TMA_SMEM_ALIGN} bytes, as TMA's shared-memory addresses must")
    return TmaPlan(dims=tuple(reversed(list(src.shape))), strides=tuple(strides),
                   box=tuple(box), coords=tuple(reversed(list(R.mins(op.src)))),
                   swizzle=sw, panels=panels, panel_elems=box[0] * _prod(box[1:]),
                   nbytes=_prod(ext) * eb)


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def _is_zero(e) -> bool:
    return isinstance(e, (int, tirx.IntImm)) and int(e) == 0


def _depends_on_data(e) -> bool:
    from ..ir_utils import find_all

    return bool(find_all(e, tvm.ir.TensorLoad))


def _tma_plan_of(op: Copy, ctx: LowerContext, issuer_indices: bool = False,
                 load: bool = True) -> "TmaPlan | str":
    """The plan of a load by ``T.copy`` (``T.tma_copy``'s with ``issuer_indices``: its user
    orders the tensor's writes), or with ``load=False`` of a store, given as the load of its
    geometry."""
    written = ctx.kernel_written if load and not issuer_indices else frozenset()
    return tma_plan(op, ctx.target, ctx.config,
                    ctx.tile_annotations.get(R.buffer_of(op.dst).__chandle__(), {}),
                    ctx.kernel_addressed, issuer_indices, written)


def _planned(op: Copy, ctx: LowerContext) -> TmaPlan:
    plan = _tma_plan_of(op, ctx)
    if not isinstance(plan, TmaPlan):
        raise LoweringError(f"T.copy {R.describe(op.src)} -> {R.describe(op.dst)} cannot use "
                            f"TMA: {plan}")
    return plan


def tensor_map_var(buf) -> tirx.Var:
    return tirx.Var(f"{buf.name}_tensormap", tirx.op.tvm_stack_alloca("tensormap", 1).ty)


def _encode(tm, buf, plan: TmaPlan):
    dims = [tirx.Cast("int64", d) if str(d.ty) != "int64" else d for d in plan.dims]
    return tirx.op.tensormap_encode_tiled(
        tm, buf.data, *dims, *plan.strides, *plan.box, *([1] * len(plan.box)),
        descriptor_dtype=str(buf.dtype), rank=len(plan.box), interleave=0,
        swizzle=SWIZZLE_CODE[plan.swizzle], l2_promotion=2, oob_fill=0, force_cu_dtype=-1)


def _boxes(op: Copy, plan: TmaPlan) -> list:
    """(tile element, coordinates) of each box of ``plan``."""
    dst = R.buffer_of(op.dst)
    d0 = [m for m in R.mins(op.dst)]
    out = []
    for p in range(plan.panels):
        for b in range(plan.bands):
            coords = list(plan.coords)
            coords[0] = coords[0] + p * plan.box[0]
            at = list(d0)
            if plan.panels > 1:
                at[-1] = at[-1] + p * plan.box[0]
            if plan.bands > 1:
                rows = plan.box[plan.band_dim]
                coords[plan.band_dim] = coords[plan.band_dim] + b * rows
                at[-2] = at[-2] + b * rows
            out.append((tirx.BufferLoad(dst, at), coords))
    return out


def _banded(op: Copy, plan: TmaPlan, parts: int) -> TmaPlan:
    """``plan`` with each panel cut into ``parts`` boxes along its rows (the one dim of the box
    past the innermost that is not 1: the tile's second-last), when it has fewer boxes than
    ``parts`` and its rows split into whole swizzle atoms (8 rows), so that ``parts`` blocks
    can share its issue; else ``plan``."""
    dst = R.buffer_of(op.dst)
    outer = [d for d in range(1, len(plan.box)) if int(plan.box[d]) > 1]
    if plan.panels >= parts or len(outer) != 1 or len(dst.shape) < 2:
        return plan  # (several outer dims: a box of several 2-D slices)
    (dim,) = outer
    rows = int(plan.box[dim])
    if int(dst.shape[-2]) != rows or rows % (8 * parts):
        return plan
    box = list(plan.box)
    box[dim] = rows // parts
    return replace(plan, box=tuple(box), bands=parts, band_dim=dim)


def _tma_issue(op: Copy, ctx: LowerContext, plan: TmaPlan, bar, before=(),
               scope: int = 0, cluster_mask: int = 0,
               shared_groups: tuple[int, ...] = ()) -> tirx.Stmt:
    """The loads of ``plan`` completing on barrier element ``bar`` (a ``BufferLoad``), issued
    by the group's first thread (of every ``scope`` threads) after ``before``; the tensor map
    is encoded on the host.  With a ``cluster_mask``, the block of the mask's lowest rank
    multicasts the loads to every block of the mask, the mask's other blocks issue none (their
    tiles and barriers receive the multicast), and blocks outside the mask load for
    themselves.  ``shared_groups`` (masks of as many blocks each that partition the cluster)
    deal the boxes out among each group's blocks instead (box ``i`` multicast to the group by
    its ``i mod n``-th block; a tile of fewer boxes than blocks is first cut into bands of
    rows, ``_banded``), which needs every block of a group to wait until the slot is free in
    all of them."""
    from ..device import cluster
    from ..ir_utils import seq

    def ranks(mask):
        return [r for r in range(16) if mask >> r & 1]

    # (mask, its issuing blocks): the boxes go out to ``mask``, dealt out among the issuers
    deals = [(m, ranks(m)) for m in shared_groups]
    if deals:
        sizes = {len(issuers) for _, issuers in deals}
        assert len(sizes) == 1, f"multicast groups of different sizes: {shared_groups}"
        plan = _banded(op, plan, sizes.pop())
    elif cluster_mask:
        deals = [(cluster_mask, ranks(cluster_mask)[:1])]
    src = R.buffer_of(op.src)
    tm = tensor_map_var(src)
    boxes = _boxes(op, plan)
    issues = [tirx.Evaluate(tma.tma_load(tirx.address_of(at), tirx.address_of(tm),
                                         tirx.address_of(bar), coords))
              for at, coords in boxes]
    if deals:
        rank = cluster.block_rank()
        dealt = []
        for mask, issuers in deals:
            multicast = [tirx.Evaluate(tma.tma_load_multicast(
                tirx.address_of(at), tirx.address_of(tm), tirx.address_of(bar), mask,
                coords)) for at, coords in boxes]
            dealt += [tirx.IfThenElse(rank == r, seq(multicast[i::len(issuers)]), None)
                      for i, r in enumerate(issuers) if multicast[i::len(issuers)]]
        if shared_groups:  # they partition the cluster (``cluster.rank_groups``)
            issues = dealt
        else:
            outside = tirx.bitwise_and(tirx.shift_right(tirx.const(cluster_mask, "int32"),
                                                        rank), tirx.const(1, "int32")) == 0
            issues = dealt + [tirx.IfThenElse(outside, seq(issues), None)]
    body = _scope_leader(ctx, scope, list(before) + issues)
    return tirx.AttrStmt(tm, TENSOR_MAP, _encode(tm, src, plan), body)


def _leader(ctx: LowerContext, stmts) -> tirx.Stmt:
    from ..ir_utils import seq

    rank = ctx.thread_var if ctx.thread_var is not None else tirx.const(0, "int32")
    return tirx.IfThenElse(rank == 0, seq(stmts), None)


def _tma_sync(op: Copy, ctx: LowerContext, plan: TmaPlan) -> tirx.Stmt:
    """A copy outside a pipeline: a barrier of the group (earlier readers of the tile are
    done), one thread arms a barrier with the bytes and issues the loads, every thread waits
    on the barrier's current phase, whose parity a per-thread variable tracks."""
    from ..ir_utils import seq

    bar = tirx.decl_buffer([1], "uint64", f"{R.buffer_of(op.dst).name}_tma_bar",
                           scope="shared.dyn")
    phase = tirx.decl_buffer([1], "int32", f"{R.buffer_of(op.dst).name}_tma_phase",
                             scope="local")
    b0 = tirx.BufferLoad(bar, [0])
    issue = _tma_issue(op, ctx, plan, b0)
    arm = _leader(ctx, [tirx.Evaluate(tma.mbarrier_arrive_expect_tx(tirx.address_of(b0),
                                                                    plan.nbytes))])
    ph = tirx.BufferLoad(phase, [0])
    return seq([
        tirx.AllocBuffer(bar, annotations={MBARRIER: [1]}),
        tirx.AllocBuffer(phase, annotations={KERNEL_VAR: 0}),
        _group_barrier(ctx), arm, issue,
        tirx.Evaluate(tma.mbarrier_wait(tirx.address_of(b0), ph)),
        tirx.BufferStore(phase, tirx.bitwise_xor(ph, 1), [0]),
    ])


def _group_barrier(ctx: LowerContext) -> tirx.Stmt:
    """A barrier of the threads that run the op (the block's, or a ``T.ws`` group's)."""
    return tirx.Evaluate(device.barrier(ctx.barriers.of(ctx.group) if ctx.barriers else 0,
                                        ctx.group.count))


def _sync_load(op: Copy, ctx: LowerContext) -> bool:
    """A global -> shared copy the block waits for (not issued ahead by a pipeline, not per
    element inside ``T.Parallel``)."""
    return R.scope_of(op.src) == "global" and R.scope_of(op.dst).startswith("shared") and \
        not ctx.async_copy and not ctx.in_parallel


def _in_tma_pipeline(op: Copy, ctx: LowerContext) -> bool:
    """A producer of an mbarrier-ring pipeline (sm_90+): TMA loads completing on its barrier."""
    return ctx.tma_barrier is not None


def _tma_sync_applies(op: Copy, ctx: LowerContext) -> bool:
    """A waited-for load that TMA can do (sm_90+, not turned off, see :func:`tma_plan`)."""
    return _sync_load(op, ctx) and isinstance(_tma_plan_of(op, ctx), TmaPlan)


def _sync_store(op: Copy, ctx: LowerContext) -> bool:
    """A shared -> global copy of a tile by the whole group (not per element inside
    ``T.Parallel``)."""
    return R.scope_of(op.src).startswith("shared") and R.scope_of(op.dst) == "global" and \
        not ctx.async_copy and not ctx.in_parallel


def _load_geometry(span, gmem, tile, disable_tma: bool = False) -> Copy:
    """The global -> shared copy of region ``gmem`` into ``tile``: a TMA move between them,
    either way, has its geometry."""
    return Copy(span=span, src=gmem, dst=tile, coalesced_width=0, disable_tma=disable_tma,
                eviction_policy="")


def _as_load(op: Copy) -> Copy:
    return _load_geometry(op.span, op.dst, op.src, op.disable_tma)


def _tma_store_plan(op: Copy, ctx: LowerContext) -> "TmaPlan | str":
    gmem = R.buffer_of(op.dst)
    if gmem.__chandle__() in ctx.kernel_touched:
        # a TMA store's global writes land asynchronously, unordered with the kernel's own
        # other reads and writes of the tensor
        return f"the kernel also reads {gmem.name} or writes it other than by T.copy"
    return _tma_plan_of(_as_load(op), ctx, load=False)


def _tma_store_applies(op: Copy, ctx: LowerContext) -> bool:
    """A tile store that TMA can do (sm_90+, not turned off, see :func:`tma_plan`)."""
    return _sync_store(op, ctx) and isinstance(_tma_store_plan(op, ctx), TmaPlan)


def _copy_tma_store(op: Copy, ctx: LowerContext) -> tirx.Stmt:
    """The tile leaves in TMA stores issued by one thread, which waits until they have read
    the tile (so the tile may be written again after the group's next barrier)."""
    return _tma_store_issue(_as_load(op), ctx, _tma_store_plan(op, ctx), 0, wait=True)


def _copy_tma_producer(op: Copy, ctx: LowerContext) -> tirx.Stmt:
    """A load of a warp-specialized pipeline; a multicast one is issued by every block of its
    group (the cluster, or the blocks of the cluster that load it alike), each multicasting its
    share of the boxes to the group (the protocol frees a slot only when every block of the
    cluster is done with it)."""
    return _tma_issue(op, ctx, _planned(op, ctx), ctx.tma_barrier,
                      shared_groups=ctx.tma_multicast)


def _copy_tma_sync(op: Copy, ctx: LowerContext) -> tirx.Stmt:
    return _tma_sync(op, ctx, _planned(op, ctx))


# The copy's lowerings, tried in order.
Copy.lowering("cpu")(elementwise_copy)
Copy.lowering("cuda", when=_in_tma_pipeline)(_copy_tma_producer)
Copy.lowering("cuda", when=_tma_sync_applies)(_copy_tma_sync)
Copy.lowering("cuda", when=_tma_store_applies)(_copy_tma_store)
Copy.lowering("cuda")(_copy_cuda)


@register
class TmaCopy(TileOp):
    """``T.tma_copy``: a TMA load's producer half (the leader of each scope of
    ``leader_scope`` threads (0: the whole group) expects the tile's bytes on ``barrier`` and
    issues the loads; no arrival, no wait) or a TMA store shared -> global (the leader issues
    the stores and commits them as one bulk group; no wait).  A load with a nonzero
    ``cluster_mask`` is multicast to the blocks of the cluster the mask names."""

    name = "tl.tma_copy"
    printer = "tma_copy"
    fields = ("src", "dst", "leader_scope", "barrier", "cluster_mask")
    writes = ("dst", "barrier")
    defaults = {"barrier": None, "cluster_mask": 0}


def tma_copy_op(src: Any, dst: Any, barrier, leader_scope: int = 0,
                cluster_mask: int = 0) -> tvm.ir.Call:
    if R.is_element(src):
        d = R.region_of(dst, "T.tma_copy", "destination")
        s = R.region_of(src, "T.tma_copy", "source", like_shape=R.extents(d))
    else:
        s = R.region_of(src, "T.tma_copy", "source")
        d = R.region_of(dst, "T.tma_copy", "destination", like_shape=R.extents(s))
    if not R.same_shape(R.squeeze(R.extents(s)), R.squeeze(R.extents(d))):
        raise TileOpError(f"T.tma_copy: source {R.describe(s)} has shape "
                          f"{R.fmt_shape(R.extents(s))} but destination {R.describe(d)} has "
                          f"shape {R.fmt_shape(R.extents(d))}")
    store = R.scope_of(s).startswith("shared") and R.scope_of(d) == "global"
    if not store and not (R.scope_of(s) == "global" and R.scope_of(d).startswith("shared")):
        raise TileOpError(f"T.tma_copy: {R.describe(s)} ({R.scope_of(s)}) -> {R.describe(d)} "
                          f"({R.scope_of(d)}): TMA copies global -> shared or shared -> global")
    if not store and barrier is None:
        raise TileOpError("T.tma_copy: a load (global -> shared) needs barrier= (a barrier "
                          "from T.alloc_barrier)")
    if store and cluster_mask:
        raise TileOpError(f"T.tma_copy {R.describe(s)} -> {R.describe(d)}: cluster_mask= "
                          "multicasts loads (global -> shared); a store has none")
    return TmaCopy(src=s, dst=d, leader_scope=leader_scope,
                   barrier=None if store else barrier, cluster_mask=cluster_mask).to_call()


def _scope_leader(ctx: LowerContext, scope: int, stmts) -> tirx.Stmt:
    """``stmts`` run by the first thread of every ``scope`` threads of the group (of the
    group when ``scope`` is 0 or covers it)."""
    from ..ir_utils import seq

    if not scope or scope >= ctx.num_threads:
        return _leader(ctx, stmts)
    rank = ctx.thread_var if ctx.thread_var is not None else tirx.const(0, "int32")
    return tirx.IfThenElse(tirx.floormod(rank, scope) == 0, seq(stmts), None)


@TmaCopy.lowering("cpu")
def _tma_copy_cpu(op: TmaCopy, ctx: LowerContext) -> tirx.Stmt:
    """A store is the copy itself (its wait then has nothing to wait for), refused where no
    TMA store could do it, as on the GPU; a load has no CPU form, as the barrier that counts
    its bytes has none."""
    if op.barrier is not None:
        raise LoweringError(f"T.tma_copy {R.describe(op.src)} -> {R.describe(op.dst)}: a TMA "
                            "load has no CPU form (its barrier has none); T.copy loads "
                            "everywhere")
    problem = tma_geometry_problem(_load_geometry(op.span, op.dst, op.src),
                                   ctx.kernel_addressed, issuer_indices=True)
    if problem is not None:
        raise LoweringError(f"T.tma_copy {R.describe(op.src)} -> {R.describe(op.dst)}: {problem}")
    return elementwise_copy(Copy(span=op.span, src=op.src, dst=op.dst, coalesced_width=0,
                                 disable_tma=True, eviction_policy=""), ctx)


@TmaCopy.lowering("cuda")
def _tma_copy_cuda(op: TmaCopy, ctx: LowerContext) -> tirx.Stmt:
    from ..ir_utils import seq

    store = op.barrier is None
    gmem, tile = (op.dst, op.src) if store else (op.src, op.dst)
    as_copy = _load_geometry(op.span, gmem, tile)
    plan = _tma_plan_of(as_copy, ctx, issuer_indices=True)
    if not isinstance(plan, TmaPlan):
        raise LoweringError(f"T.tma_copy {R.describe(op.src)} -> {R.describe(op.dst)}: {plan}")
    scope = int(op.leader_scope or 0)
    if store:
        return _tma_store_issue(as_copy, ctx, plan, scope)
    expect = tirx.Evaluate(tma.mbarrier_expect_tx(tirx.address_of(op.barrier), plan.nbytes))
    return _tma_issue(as_copy, ctx, plan, op.barrier, before=[expect], scope=scope,
                      cluster_mask=int(op.cluster_mask or 0))


def _tma_store_issue(op: Copy, ctx: LowerContext, plan: TmaPlan, scope: int,
                     wait: bool = False) -> tirx.Stmt:
    """Every thread orders its writes of the tile before the async proxy's reads, then the
    group meets at a barrier (the order the CUDA programming guide gives for a TMA store); the
    leader stores the boxes of ``plan`` (``op``: global ``src`` <- shared ``dst``), commits
    them as one bulk group and, with ``wait``, waits until the group has read the tile."""
    from ..ir_utils import seq

    gbuf = R.buffer_of(op.src)
    tm = tensor_map_var(gbuf)
    stores = [tirx.Evaluate(tma.tma_store(tirx.address_of(tm), tirx.address_of(at), coords))
              for at, coords in _boxes(op, plan)]
    stores.append(tirx.Evaluate(tma.tma_store_commit()))
    if wait:
        stores.append(tirx.Evaluate(tma.tma_store_wait(0, read=True)))
    # the fence names no tile: one naming the tile would count as a read of it, and put a
    # barrier before the fence
    body = seq([tirx.Evaluate(device.fence_proxy_async_shared()), _group_barrier(ctx),
                _scope_leader(ctx, scope, stores)])
    return tirx.AttrStmt(tm, TENSOR_MAP, _encode(tm, gbuf, plan), body)
