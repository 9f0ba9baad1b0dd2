"""``PlanSharedMemory``: place every shared tile of a kernel in one dynamic shared arena.

Expects: lowered tile operators (all shared tiles, scratch included, exist as allocations).
Guarantees: one ``shared.dyn`` byte arena per kernel; each tile becomes a flat view at its own
128-byte-aligned offset (``8 x swizzle_bytes``, i.e. 1024 bytes for a 128B TMA/GMMA swizzle, for
tiles whose layout has one) (no two tiles overlap, so asynchronous copies can never clobber a live
tile), accesses are rewritten to the view with the tile's layout applied (``tl.swizzle``
tiles get the bank-conflict-free swizzle of ``tilelang.layout.swizzle``), and the kernel
declares its arena size.  A ``T.view`` / ``T.reshape`` of a tile is the tile's bytes: it lives
as long as any of its names is used (``Liveness`` aliases), and becomes a flat buffer of its
own dtype declared over the tile's flat view (:func:`planned_views` finds them), indexed
through the tile's layout carried over by ``shared_view_layout``.  Raises ``LoweringError`` when the arena exceeds what the target's
architecture allows per block.  CPU: unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from ..device import sm80 as device
from ..engine.target import is_cpu
from ..errors import LoweringError
from ..layout import codec
from ..layout.swizzle import alignment_of, can_swizzle, make_swizzled_layout, swizzle_offset
from ..device.thread_group import BarrierIds, ThreadGroup, consumer_body_of, group_of, \
    with_consumer_body
from ..ir_utils import (find_all, kernels_of, launch_chain, map_nodes, relaunch, seq,
                        StmtMutator)
from .passes import function_pass, target_of
from ..language.view import shared_view_layout, viewed_buffer
from .shared_liveness import LiveRange, Liveness, kernel_units

SHARED = ("shared", "shared.dyn")
ALIGN = 128

# Most dynamic shared memory one block may use, by compute capability.
SMEM_LIMIT = {70: 96, 72: 48, 75: 64, 80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227,
              101: 227, 103: 227, 110: 227, 120: 99, 121: 99}


def arch_limit(arch: str) -> int:
    digits = "".join(c for c in arch[3:] if c.isdigit())
    cc = int(digits) if digits else 80
    known = [k for k in SMEM_LIMIT if k <= cc]
    return SMEM_LIMIT[max(known)] * 1024 if known else 48 * 1024


def smem_limit(target) -> tuple[int, str]:
    """Bytes of dynamic shared memory a block may use, and where that limit comes from: the
    architecture's, or the target's smaller ``max_shared_memory_per_block``."""
    arch = str(target.attrs.get("arch", "sm_80"))
    hw = arch_limit(arch)
    given = target.attrs.get("max_shared_memory_per_block")
    if given is not None and 0 < int(given) < hw:
        return int(given), "the target's max_shared_memory_per_block"
    return hw, f"a block on {arch}"


def _key(x):
    return x.__chandle__()


def tile_bytes(buf) -> int:
    """Bytes of a shared tile with a constant shape (0 for another)."""
    if not all(isinstance(x, tirx.IntImm) for x in buf.shape):
        return 0
    return int(np.prod([int(x) for x in buf.shape])) * max(1, tvm.DataType(buf.dtype).bits // 8)


def staged_peak(body, staged, live_from_start=frozenset()) -> int:
    """An estimate of the arena the kernels of ``body`` need once planned with reuse: each
    tile (``staged`` ones ``copies`` times, rounded up to 1024 bytes) placed as the planner
    places it, by the live ranges of its kernel's top-level statements, so that tiles of
    disjoint lifetimes share bytes.  The tiles keyed in ``live_from_start`` are live from the
    kernel's first statement (a warp specialization's producer, which may run ahead of the
    code before its loop)."""
    copies = {_key(b): n for b, n in staged}
    need = 0
    for kernel in kernels_of(body) or [body]:
        chain, kbody = launch_chain(kernel)
        allocs = [a for a in find_all(kbody, tirx.AllocBuffer) if a.buffer.scope() in SHARED]
        views = _Collect()
        views(kbody)
        units = [u for u in kernel_units(kbody) if not (isinstance(u, tirx.AllocBuffer) and
                                                         u.buffer.scope() in SHARED)]
        live = Liveness(units, {_key(a.buffer): a.buffer for a in allocs}, _threads(chain),
                        {k: _key(t) for k, (_, t) in views.views.items()})
        placed = []
        for a in allocs:
            span = live.ranges.get(_key(a.buffer))
            if span is None:
                continue
            if _key(a.buffer) in live_from_start:
                span = LiveRange(0, span.last)
            size = (tile_bytes(a.buffer) * copies.get(_key(a.buffer), 1) + 1023) // 1024 * 1024
            offset = _first_fit(placed, span, size, 1024)
            placed.append(_Placed(_key(a.buffer), span, offset, offset + size))
        need = max([need] + [p.end for p in placed])
    return need


def fit_stages(asked: dict, need: Callable[[dict], int], limit: int) -> dict | None:
    """``asked`` (ring -> stages) with a stage taken from the deepest ring at a time until the
    rings fit: ``need(stages)``, their bytes, is at most ``limit``; ``None`` when even two
    stages each do not fit."""
    stages = dict(asked)
    while need(stages) > limit:
        deepest = max(stages, key=stages.get)
        if stages[deepest] <= 2:
            return None
        stages[deepest] -= 1
    return stages


class _Collect(StmtMutator):
    """Removes shared allocations and the declarations of their views (``T.view`` /
    ``T.reshape``), remembering them in program order; ``views`` maps each view's key to
    ``(view, tile)``, the tile it is the bytes of."""

    def __init__(self):
        self.allocs: list = []
        self.views: dict = {}

    def visit_AllocBuffer(self, s):
        if s.buffer.scope() in SHARED:
            self.allocs.append(s)
            return None
        return s

    def visit_DeclBuffer(self, s):
        base = viewed_buffer(s)
        if base is None or base.scope() not in SHARED:
            return s
        _, tile = self.views.get(_key(base), (None, base))  # a view of a view: of the tile
        self.views[_key(s.buffer)] = (s.buffer, tile)
        return None


def _check_viewed(views: dict, allocs: list) -> None:
    """Every view's tile is a shared allocation of the kernel."""
    tiles = {_key(a.buffer) for a in allocs}
    for v, tile in views.values():
        if _key(tile) not in tiles:
            raise LoweringError(
                f"{v.name} is a T.view/T.reshape of the shared tile {tile.name}, which is not "
                "one tile any more when shared memory is planned (a tile written in a "
                "T.Pipelined loop is stored once per stage); view a tile outside pipelined "
                "loops, or copy it")


def _linear(idx, shape):
    off = tirx.const(0, "int32")
    for i, s in zip(idx, shape):
        off = off * s + i
    return off


def _phys(idx, buf, swizzled: bool, layout=None):
    shape = list(buf.shape)
    if layout is not None:
        # a layout of the 2-D tile applies to each stage of a tile the pipeline stacked
        nd = len(layout.shape)
        out = list(layout.index_map.map_indices(list(idx[len(idx) - nd:])))
        oshape = [int(x) for x in layout.output_shape]
        size = int(np.prod(oshape))
        lead = _linear(idx[:len(idx) - nd], shape[:len(idx) - nd]) if len(idx) > nd else 0
        return lead * size + _linear(out, oshape)
    if swizzled and len(shape) >= 2:
        rows, cols = shape[-2], shape[-1]
        lead = _linear(idx[:-2], shape[:-2]) if len(shape) > 2 else tirx.const(0, "int32")
        return lead * (rows * cols) + swizzle_offset(idx[-2], idx[-1], int(cols), buf.dtype)
    return _linear(idx, shape)


def _plan_kernel(body, target, threads: int):
    col = _Collect()
    body = col(body)
    if not col.allocs:
        return body
    _check_viewed(col.views, col.allocs)
    pool = tirx.decl_buffer([0], "uint8", "smem", scope="shared.dyn")
    units = kernel_units(body)
    consumer = _ConsumerBody.find(units)
    if consumer is not None:  # its statements are units of their own
        i = consumer.span.first
        units = units[:i] + consumer.units + units[i + 1:]
    live = Liveness(units, {_key(a.buffer): a.buffer for a in col.allocs}, threads,
                    {k: _key(t) for k, (_, t) in col.views.items()},
                    consumer.span if consumer is not None else None)
    views, placed, decls = {}, [], []
    for a in col.allocs:
        b = a.buffer
        if not all(isinstance(s, tirx.IntImm) for s in b.shape):
            raise LoweringError(f"shared tile {b.name} has shape {list(b.shape)}; on CUDA shared "
                                "tiles need constant shapes")
        span = live.ranges.get(_key(b))
        if span is None:  # nothing reads or writes it: it takes no bytes
            continue
        eb = max(1, tvm.DataType(b.dtype).bits // 8)
        n = 1
        for s in b.shape:
            n *= int(s)
        swz = "tl.swizzle" in a.annotations and can_swizzle(int(b.shape[-1]), b.dtype)
        user = codec.decode(a.annotations["tl.shared_layout"]) \
            if "tl.shared_layout" in a.annotations else None
        layout = user if user is not None else make_swizzled_layout(b) if swz else None
        tile_views = [(k, v, shared_view_layout(layout, b, v))
                      for k, (v, tile) in col.views.items() if _key(tile) == _key(b)]
        # a TMA/GMMA swizzle is computed by the hardware from address bits: the tile starts on
        # a multiple of 8 x swizzle_bytes (1024 for 128B) so that it equals the tile-offset map
        # (also where only a view of the tile is stored in such a swizzle)
        align = max([ALIGN, alignment_of(layout)] + [alignment_of(lv) for *_, lv in tile_views])
        if user is not None:  # per stage when the pipeline stacked the tile
            stages = int(np.prod([int(x) for x in b.shape[:len(b.shape) - len(user.shape)]]))
            n = max(n, stages * int(np.prod(user.output_shape)))
        offset = _first_fit(placed, span, n * eb, align)
        placed.append(_Placed(_key(b), span, offset, offset + n * eb))
        bits = tvm.DataType(b.dtype).bits
        view = tirx.decl_buffer([n], b.dtype, b.name, data=pool.data,
                                elem_offset=offset * 8 // bits, scope="shared.dyn")
        views[_key(b)] = (b, view, swz, user)
        decls.append(tirx.DeclBuffer(view, data=pool.data))
        # the tile's views: its bytes, laid out through its layout, declared over its data so
        # that later passes (InjectThreadSync) see them as the same tile
        for k, v, view_layout in tile_views:
            vbits = tvm.DataType(v.dtype).bits
            flat = tirx.decl_buffer([n * bits // vbits], v.dtype, v.name, data=view.data,
                                    elem_offset=offset * 8 // vbits, scope="shared.dyn")
            views[k] = (v, flat, False, view_layout)
            decls.append(tirx.DeclBuffer(flat, data=view.data))
    end = max((p.end for p in placed), default=0)
    total = (end + ALIGN - 1) // ALIGN * ALIGN
    limit, source = smem_limit(target)
    if total > limit:
        sizes = ", ".join(f"{a.buffer.name} {_bytes(a.buffer)} B" for a in col.allocs)
        raise LoweringError(f"the kernel needs {total} bytes of shared memory ({sizes}), more "
                            f"than the {limit} bytes allowed for {source}; use smaller tiles "
                            "or fewer stages")
    body = seq(_with_reuse_barriers(units, live, placed, threads, consumer))

    def on_load(x):
        hit = views.get(_key(x.source))
        if hit is None:
            return x
        return tirx.BufferLoad(hit[1], [_phys(list(x.indices), hit[0], hit[2], hit[3])])

    def on_store(s):
        hit = views.get(_key(s.buffer))
        if hit is None:
            return s
        return tirx.BufferStore(hit[1], s.value, [_phys(list(s.indices), hit[0], hit[2], hit[3])])

    body = map_nodes(body, [(tvm.ir.TensorLoad, on_load),
                                         (tirx.BufferStore, on_store)])
    # the size attribute wraps the kernel body (a no-op body would be dropped by later
    # simplification, e.g. TVM's RemoveAssume, and the device function would lose its size)
    return tirx.AttrStmt(tirx.const(0, "int32"), "tirx.dyn_smem_bytes",
                         tirx.IntImm("int64", total),
                         seq([tirx.AllocBuffer(pool)] + decls + [body]))


def planned_views(body) -> dict:
    """In a planned kernel: the key of each view of a tile (a shared buffer declared over the
    data of a tile, itself declared over the arena) -> the tile's key."""
    declared, over = set(), {}

    def on_decl(d):
        declared.add(_key(d.buffer))
        base = viewed_buffer(d)
        if base is not None and base.scope() in SHARED:
            over[_key(d.buffer)] = _key(base)

    tvm_ffi.structural_walk(body, (tirx.DeclBuffer, on_decl))
    out = {}
    for k, base in over.items():
        if base not in declared:
            continue  # a tile: declared over the arena
        while base in over and over[base] in declared:
            base = over[base]
        out[k] = base
    return out


@dataclass(frozen=True)
class _Placed:
    key: int
    span: LiveRange
    start: int
    end: int


def _first_fit(placed: list, span: LiveRange, nbytes: int, align: int) -> int:
    """The lowest ``align``-ed offset where ``nbytes`` overlap no placed tile live at the same
    time as ``span``."""
    busy = sorted((p.start, p.end) for p in placed if p.span.overlaps(span))
    offset = 0
    for lo, hi in busy:
        if offset + nbytes <= lo:
            break
        offset = max(offset, (hi + align - 1) // align * align)
    return offset


class _ConsumerBody:
    """The body of a warp-specialized kernel's consumer region (``CONSUMER_BODY_ATTR``),
    whose statements the planner takes as units of the kernel: its tiles' live ranges follow
    the consumers' program order, and a reuse inside it is ordered by the consumers' own
    barrier."""

    def __init__(self, index: int, region: tirx.AttrStmt, units: list):
        self.region, self.units = region, units
        self.group = group_of(region)
        self.span = LiveRange(index, index + len(units) - 1)

    @staticmethod
    def find(units: list) -> "_ConsumerBody | None":
        for i, u in enumerate(units):
            inner = consumer_body_of(u)
            if inner is not None:
                return _ConsumerBody(i, u, kernel_units(inner.body))
        return None

    def inside(self, j: int) -> bool:
        return self.span.first <= j <= self.span.last

    def region_of(self, stmts: list) -> tirx.Stmt:
        """The region with ``stmts`` as its body."""
        return with_consumer_body(self.region, seq(stmts))


def _with_reuse_barriers(units: list, live: Liveness, placed: list, threads: int,
                         consumer: "_ConsumerBody | None" = None) -> list:
    """``units`` with a barrier wherever a tile takes over bytes of a tile whose lifetime
    ended earlier: between the old tile's last unit and the new one's first, so that every
    thread is done with the old contents before any thread writes the new.  Inside a
    warp-specialized consumer body (``consumer``, whose units are spliced into ``units``;
    returned in its region again) a reuse with both lifetimes there gets the consumers'
    barrier; one reaching into the body from before it gets a block barrier before the
    region.  When the new tile is first written through the async proxy (TMA), a proxy fence
    precedes the barrier.  InjectThreadSync, which tracks each tile's own view, does not see
    this aliasing."""
    def inner(j: int) -> bool:
        return consumer is not None and consumer.inside(j)

    def existing(j: int, group: bool) -> bool:
        if group:
            return live.barrier_threads_at(j) >= consumer.group.count
        return live.block_barrier_at(j) and not inner(j)

    gaps = []  # (lo, hi, consumers' barrier, async): a barrier before unit p, lo < p <= hi
    for i, p in enumerate(placed):
        for q in placed[:i]:
            if p.start >= q.end or q.start >= p.end:
                continue
            old, new = (q, p) if q.span.last < p.span.first else (p, q)
            lo, hi = old.span.last, new.span.first
            group = inner(lo) and inner(hi)
            if inner(hi) and not group:  # a block barrier, before the consumers' region
                hi = consumer.span.first
            gaps.append((lo, hi, group, live.first_access_is_async(new.key)))
    points = {(j, g): False for j in range(len(units)) for g in (False, True)
              if (not g or inner(j)) and existing(j, g)}  # (p, group) -> fenced
    for lo, hi, group, fenced in sorted(gaps, key=lambda g: g[1]):
        if any(lo < p <= hi and g == group and (f or not fenced)
               for (p, g), f in points.items()):
            continue
        points[(hi, group)] = points.get((hi, group), False) or fenced

    def barrier(j: int, group: bool) -> list:
        if (j, group) not in points or existing(j, group):
            return []
        bar = device.barrier(BarrierIds(ThreadGroup(0, threads)).of(consumer.group),
                             consumer.group.count) if group else device.barrier(0, threads)
        fence = [tirx.Evaluate(device.fence_proxy_async_shared())] if points[(j, group)] else []
        return fence + [tirx.Evaluate(bar)]

    out, body = [], []
    for j, u in enumerate(units):
        out += barrier(j, False)
        if not inner(j):
            out.append(u)
            continue
        body += barrier(j, True) + [u]
        if j == consumer.span.last:
            out.append(consumer.region_of(body))
    return out


def _bytes(b) -> int:
    n = 1
    for s in b.shape:
        n *= int(s)
    return n * max(1, tvm.DataType(b.dtype).bits // 8)


def _threads(chain: list) -> int:
    """Threads of the block a kernel's launch attributes ``chain`` start."""
    threads = 1
    for a in chain:
        if a.attr_key == "thread_extent" and a.node.thread_tag.startswith("threadIdx") \
                and isinstance(a.value, tirx.IntImm):
            threads *= int(a.value)
    return threads


class _Kernels(StmtMutator):
    def __init__(self, target):
        self.target = target

    def visit_AttrStmt(self, s):
        if s.attr_key != "thread_extent":
            return self.generic(s)
        chain, body = launch_chain(s)
        body = _plan_kernel(body, self.target, _threads(chain))
        body = relaunch(chain, body)
        return body


@function_pass("tl.PlanSharedMemory")
def PlanSharedMemory(func: tirx.PrimFunc) -> tirx.PrimFunc:
    target = target_of(func)
    if is_cpu(target):
        return func
    return func.with_body(_Kernels(target)(func.body))
