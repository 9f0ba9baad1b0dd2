"""``LayoutInference``: choose how every fragment is spread over the threads that use it.

Expects: a CUDA-targeted PrimFunc with tile-op calls and ``T.Parallel`` nests.
Guarantees: every ``local.fragment`` allocation carries ``tl.layout`` (a ``Fragment``), every
outermost ``T.Parallel`` loop carries ``tl.loop_layout``, and shared tiles that feed a gemm
carry ``tl.swizzle``, or ``tl.shared_layout`` for a layout applied when shared memory is
planned (a wgmma operand's GMMA swizzle, a ``T.annotate_layout``).  The demands come from the
ops themselves (``TileOp.infer_layout``, ``TileOp.propagate_layout``); this pass knows no op.
Thread groups: warp-group branches on the thread index become ``T.ws`` regions first
(``thread_branches``); each op, loop and fragment belongs to the group of the code using it
(the block, a ``T.ws`` region or such a branch), ops see that group's thread count, and a
fragment's layout numbers the group's threads by rank (``tx - offset``).  A fragment used by
two groups raises ``LoweringError`` naming both uses.
Order: every op's fixed demands in program order (``T.annotate_layout``; a gemm's accumulator,
register operand and shared-operand swizzles), then propagation (ops' hooks, e.g. fragment
copies and reductions, and ``T.Parallel`` bodies) until nothing changes; a fragment still free
gets a default element-wise layout that serves its ``T.Parallel`` accesses (dims indexed by
serial loops held in registers, windows kept in one set of threads) and propagation resumes.  Two different demands on one
fragment raise a ``LoweringError`` naming both sources and both layouts.  The CPU needs no
layouts: it returns the function unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from ..device.effects import synchronizes
from ..device.thread_group import ThreadGroup, group_of
from ..engine.target import is_cpu
from ..errors import LoweringError, source_location
from ..layout import codec
from ..layout.swizzle import SwizzledLayout
from ..layout.fragment import REG, Factor, Fragment, elementwise, is_replicated, replicated
from ..language.view import reshaped_layout, shared_view_layout, viewed_buffer
from ..ir_utils import StmtMutator, map_kernels, peel_parallel, uses_var
from ..ops import decode
from ..ops import region as R
from . import pass_config
from .passes import at_source, function_pass, target_of
from .thread_branches import derive_thread_groups

FRAGMENT = "local.fragment"
SHARED = ("shared", "shared.dyn")


def key(obj) -> int:
    return obj.__chandle__()


def is_fragment(buf) -> bool:
    return buf.scope() == FRAGMENT


def num_threads_of(body) -> int:
    n = 1
    for a in _attrs(body):
        if a.attr_key == "thread_extent" and a.node.thread_tag.startswith("threadIdx"):
            n *= int(a.value)
    return n


def _attrs(node):
    out = []
    tvm_ffi.structural_walk(node, (tirx.AttrStmt, out.append))
    return out


@dataclass
class _Loop:
    node: tirx.For
    vars: list
    extents: list
    accesses: list  # (buffer, indices)
    inner: set = field(default_factory=set)  # handles of the loop vars nested in the body
    stored: set = field(default_factory=set)  # keys of the fragments the body writes
    group: ThreadGroup | None = None  # the threads the loop is spread over
    synchronizes: bool = False  # the body has a barrier: its iterations wait for each other


class _State:
    """The layouts found so far, and the demands ops stated (the ``LayoutContext`` the ops'
    layout hooks see)."""

    def __init__(self, target=None, num_threads: int = 1, config: dict | None = None):
        self.target, self.num_threads, self.config = target, num_threads, config or {}
        self.layouts: dict = {}  # buffer key -> Fragment
        self.origin: dict = {}
        self.buffers: dict = {}  # key -> buffer
        self.loops: dict = {}  # loop key -> Fragment
        self.user_shared: dict = {}  # shared buffer key -> encoded layout of T.annotate_layout
        self.swizzled: dict = {}  # mma.sync operand key -> buffer
        self.gmma: dict = {}  # wgmma operand key -> (encoded GMMA layout, buffer)
        self.shared_layouts: dict = {}  # shared buffer key -> encoded Layout (resolved)
        self.recorded: dict = {}  # op's Evaluate key -> the op with its decisions recorded
        self.views: dict = {}  # key of a T.view/T.reshape of a fragment -> (view, viewed)
        self.shared_views: dict = {}  # key of a view of a shared tile -> (view, the tile)
        self.changed = False

    def demand(self, buf, layout: Fragment, why: str):
        k = key(buf)
        if k in self.views:  # a view has its fragment's registers: the demand is on those
            view, base = self.views[k]
            if list(layout.shape) != [int(s) for s in view.shape]:
                raise LoweringError(f"layout of shape {layout.shape} from {why} does not fit "
                                    f"the view {view.name} of shape {R.fmt_shape(view.shape)}")
            self.demand(base, reshaped_layout(layout, view, base, why),
                        f"{why} (through the view {view.name})")
            return
        old = self.layouts.get(k)
        if old is not None:
            if not old.same_as(layout):
                raise LoweringError(
                    f"layout conflict on fragment {buf.name}: {self.origin[k]} gives {old}, "
                    f"but {why} needs {layout}")
            return
        if list(layout.shape) != [int(s) for s in buf.shape]:
            raise LoweringError(f"layout of shape {layout.shape} from {why} does not fit "
                                f"fragment {buf.name} of shape {R.fmt_shape(buf.shape)}")
        self.layouts[k] = layout
        self.origin[k] = why
        self.buffers[k] = buf
        self.changed = True

    def layout(self, buf):
        k = key(buf)
        if k in self.views:
            view, base = self.views[k]
            lay = self.layout(base)
            return None if lay is None else reshaped_layout(lay, base, view, self.why(base))
        return self.layouts.get(k)

    def why(self, buf) -> str:
        """The demand that fixed ``buf``'s layout (``""`` when none or a view's)."""
        return self.origin.get(key(buf), "")

    def annotate_shared(self, buf, layout: str) -> None:
        self.user_shared[key(buf)] = layout

    def swizzle_operand(self, buf) -> None:
        self.swizzled[key(buf)] = buf

    def gmma_operand(self, buf, layout: str) -> None:
        old = self.gmma.get(key(buf))
        if old is not None and old[0] != layout:
            raise LoweringError(f"{buf.name} is an operand of two wgmma gemms "
                                "that need different swizzles")
        self.gmma[key(buf)] = (layout, buf)

    def resolve_shared(self) -> set:
        """Settle the shared tiles' demands: ``shared_layouts`` gets the layouts applied as
        index maps; returns the keys of the tiles stored in the sm80 swizzle."""
        self._onto_viewed_tiles()
        shared_layouts = dict(self.user_shared)
        swizzle = set(self.swizzled)
        for k, (text, buf) in self.gmma.items():
            if k in shared_layouts and shared_layouts[k] != text and \
                    not isinstance(codec.decode(shared_layouts[k]), SwizzledLayout):
                raise LoweringError(
                    f"T.annotate_layout: {buf.name} is a wgmma operand, stored in the GMMA "
                    f"swizzle {codec.decode(text)}; got {codec.decode(shared_layouts[k])}")
            if k in self.swizzled:
                raise LoweringError(f"{buf.name} feeds both a wgmma and an mma.sync gemm, whose "
                                    "shared layouts differ")
            shared_layouts[k] = text
        for k, text in shared_layouts.items():
            lay = codec.decode(text)
            if _is_sm80_swizzle(lay) and k not in self.gmma:
                swizzle.add(k)
                continue
            if k in self.swizzled:
                raise LoweringError(
                    f"T.annotate_layout: {self.swizzled[k].name} feeds a T.gemm, whose shared "
                    f"operands use the swizzled layout (make_swizzled_layout); got {lay}")
            swizzle.discard(k)
        self.shared_layouts = {k: v for k, v in shared_layouts.items()
                               if k in self.gmma or not _is_sm80_swizzle(codec.decode(v))}
        return swizzle

    def _onto_viewed_tiles(self) -> None:
        """A demand on a view of a shared tile is one on the tile's bytes: it becomes the
        tile's layout that stores them alike (``shared_view_layout``)."""
        from ..layout.swizzle import make_swizzled_layout

        for k, (view, tile) in self.shared_views.items():
            user, gmma = self.user_shared.pop(k, None), self.gmma.pop(k, None)
            if gmma is not None:
                self.gmma_operand(tile, codec.encode(
                    shared_view_layout(codec.decode(gmma[0]), view, tile)))
            if self.swizzled.pop(k, None) is not None:  # an mma.sync operand
                tl = shared_view_layout(make_swizzled_layout(view), view, tile)
                if tl is not None and _is_sm80_swizzle(tl):
                    self.swizzle_operand(tile)
                elif tl is not None:
                    self._lay_out_through(view, tile, tl, "a T.gemm's swizzle of its operand")
            if user is not None:
                tl = shared_view_layout(codec.decode(user), view, tile)
                if tl is not None:
                    self._lay_out_through(view, tile, tl, "T.annotate_layout")

    def _lay_out_through(self, view, tile, layout, why: str) -> None:
        old, text = self.user_shared.get(key(tile)), codec.encode(layout)
        if old is not None and old != text:
            raise LoweringError(
                f"{view.name} is a view of the shared tile {tile.name}: {why} on "
                f"{view.name} stores {tile.name} as {layout}, but {tile.name} is laid out as "
                f"{codec.decode(old)}")
        self.user_shared[key(tile)] = text


def fragment_accesses(body) -> list:
    out = []

    def on_load(x):
        if is_fragment(x.source):
            out.append((x.source, list(x.indices)))

    def on_store(s):
        if is_fragment(s.buffer):
            out.append((s.buffer, list(s.indices)))

    tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, on_load), (tirx.BufferStore, on_store)])
    return out


def is_zero(e) -> bool:
    return isinstance(e, tirx.IntImm) and int(e) == 0


def _as_loop_vars(indices, loop_vars) -> list[int] | None:
    """Positions of the loop vars the indices are (in order), or None."""
    pos = []
    keys = [key(v) for v in loop_vars]
    for e in indices:
        if not isinstance(e, tvm.ir.Var) or key(e) not in keys:
            return None
        pos.append(keys.index(key(e)))
    if pos != sorted(pos) or len(set(pos)) != len(pos):
        return None
    return pos


def check_constant_extents(loop: tirx.For, extents) -> None:
    """Raise a ``LoweringError`` naming the loop's source line unless every extent of the
    ``T.Parallel`` nest is a constant (its iterations are spread over threads and registers
    when the kernel is compiled)."""
    bad = [e for e in extents if not isinstance(e, tirx.IntImm)]
    if bad:
        where = source_location(loop.span)
        raise LoweringError(
            f"T.Parallel loop over {list(extents)}: extent {bad[0]} is not a constant; on "
            "CUDA a T.Parallel nest is spread over threads and registers when the kernel is "
            "compiled, so its extents must be known then (Python ints or jit parameters; "
            "guard the tail with an if inside a constant-extent loop instead)"
            + (f"\n  {where}" if where else ""))


class _Collect:
    def __init__(self, block: ThreadGroup | None = None):
        self.group = block  # the thread group running the code being visited
        self.ops: list = []
        self.op_stmts: list = []  # the Evaluate of each op
        self.op_groups: list = []  # the thread group of each op
        self.uses: dict = {}  # fragment key -> {group: where it is used from there}
        self.loops: list[_Loop] = []
        self.fragments: list = []
        self.shared: list = []
        self.scalar_reads: dict = {}  # key -> (fragment, indices) read in scalar code
        self.views: list = []  # (view, viewed fragment) of each T.view/T.reshape of one
        self.shared_views: list = []  # (view, viewed shared tile)

    def run(self, body):
        self._visit(body)

    def _scalar(self, *exprs):
        """Fragment elements read by scalar code (outside T.Parallel) whose value every
        thread needs: conditions, loop bounds, per-thread variables, indices."""
        for e in exprs:
            if e is None:
                continue
            for buf, idx in fragment_accesses(e):
                self.scalar_reads.setdefault(key(buf), (buf, idx))
                self._use(buf, f"the read of {buf.name}[{', '.join(map(str, idx))}]", None)

    def _use(self, buf, what: str, span) -> None:
        """Fragment ``buf`` is touched by the current group's code (``what``, at ``span``);
        a use of a view is one of the fragment it views."""
        buf = next((base for v, base in self.views if key(v) == key(buf)), buf)
        if self.group is not None:
            where = source_location(span) if span is not None else ""
            self.uses.setdefault(key(buf), {}).setdefault(
                self.group, f"{what}" + (f" ({where})" if where else ""))

    def _visit(self, s):
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                self._visit(x)
        elif isinstance(s, tirx.For):
            if s.kind == tirx.ForKind.PARALLEL:
                vars_, exts, body = peel_parallel(s)
                check_constant_extents(s, exts)
                inner = set()
                tvm_ffi.structural_walk(body, (tirx.For, lambda f: inner.add(key(f.loop_var))))
                stored = set()
                tvm_ffi.structural_walk(body, (tirx.BufferStore, lambda x: stored.add(
                    key(x.buffer))))
                syncs = []
                tvm_ffi.structural_walk(body, (tvm.ir.Call, lambda c: syncs.append(c)
                                               if synchronizes(c) else None))
                lp = _Loop(s, vars_, exts, fragment_accesses(body), inner, stored, self.group,
                           bool(syncs))
                self.loops.append(lp)
                for buf, _ in lp.accesses:
                    self._use(buf, f"the T.Parallel loop over {list(exts)}", s.span)
                return
            self._scalar(s.min, s.extent)
            self._visit(s.body)
        elif isinstance(s, tirx.While):
            self._scalar(s.condition)
            self._visit(s.body)
        elif isinstance(s, tirx.AttrStmt):
            g = group_of(s)
            old = self.group
            if g is not None:
                self.group = g  # a thread-group region: its code runs on the group's threads
            try:
                self._visit(s.body)
            finally:
                self.group = old
        elif isinstance(s, tirx.Bind):  # TVM 0.27's LetStmt: a flat binding, no body
            self._scalar(s.value)
        elif isinstance(s, tirx.IfThenElse):
            self._scalar(s.condition)
            self._visit(s.then_case)
            if s.else_case is not None:
                self._visit(s.else_case)
        elif isinstance(s, tirx.BufferStore):
            self._scalar(*s.indices)  # a fragment element as an index
            for buf, idx in fragment_accesses(s):
                self._use(buf, f"{s.buffer.name}[{', '.join(map(str, s.indices))}] = ...",
                          s.span)
            if s.buffer.scope() in ("local", "local.var"):
                self._scalar(s.value)
            else:
                tvm_ffi.structural_walk(s.value, (tvm.ir.TensorLoad, lambda x: self._scalar(
                    *x.indices)))
        elif isinstance(s, tirx.DeclBuffer):
            base = viewed_buffer(s)
            if base is not None and is_fragment(base):
                self.views.append((s.buffer, base))
            elif base is not None and base.scope() in SHARED:
                # a view of a view is one of the same tile
                base = next((t for v, t in self.shared_views if key(v) == key(base)), base)
                self.shared_views.append((s.buffer, base))
        elif isinstance(s, tirx.AllocBuffer):
            if is_fragment(s.buffer):
                if not all(isinstance(x, tirx.IntImm) for x in s.buffer.shape):
                    raise LoweringError(f"fragment {s.buffer.name} has shape "
                                        f"{list(s.buffer.shape)}; on CUDA fragments need "
                                        "constant shapes (sizes known when the kernel is "
                                        "compiled: Python ints or jit parameters, not "
                                        "T.dynamic / T.symbolic sizes)")
                self.fragments.append(s.buffer)
            elif s.buffer.scope() in SHARED:
                self.shared.append(s.buffer)
        elif isinstance(s, tirx.Evaluate):
            op = decode(s)
            if op is not None:
                self.ops.append(op)
                self.op_stmts.append(s)
                self.op_groups.append(self.group)
                for v in vars(op).values():
                    if isinstance(v, tvm.ir.TensorRegion) and is_fragment(R.buffer_of(v)):
                        self._use(R.buffer_of(v), f"T.{op.printer}", op.span)


def _mma_sync_tiles(ops, groups, st: _State) -> set:
    """The shared tiles read by gemms that run as mma.sync.  A shared tile has one layout:
    the sm80 swizzle of mma.sync or a GMMA swizzle, so when a gemm wgmma could run shares an
    operand tile with one it cannot, every gemm of the kernel runs as mma.sync."""
    from ..ops.gemm import Gemm, mma_sync_obstacle, wgmma_plan

    gemms = [op for op in ops if isinstance(op, Gemm)]
    operands = [{key(R.buffer_of(x)) for x in (g.A, g.B) if R.scope_of(x) in SHARED}
                for g in gemms]
    plans = []
    for op, grp in zip(ops, groups):
        if isinstance(op, Gemm):
            with at_source(op.span):  # errors name the op's line
                plans.append(wgmma_plan(op, st.target, grp.count, st.config))
    # gemms on CUDA cores (no mma.sync either) read their tiles in any layout
    on_mma = [p is None and mma_sync_obstacle(g) is None for g, p in zip(gemms, plans)]
    tiles = set().union(*(own for own, mma in zip(operands, on_mma) if mma))
    if any(p is not None and own & tiles for own, p in zip(operands, plans)):
        # a wgmma gemm shares a tile with an mma.sync one: the kernel's gemms all take
        # mma.sync, whose fragments (accumulators feeding register operands) then agree too
        tiles = set().union(*operands)
    return tiles


class _InGroup:
    """The ``LayoutContext`` an op's layout hooks see: the kernel's state, with
    ``num_threads`` the op's thread group (the block, a ``T.ws`` region or a warp-group
    branch)."""

    def __init__(self, st: _State, group: ThreadGroup):
        self._st, self.group = st, group

    @property
    def num_threads(self) -> int:
        return self.group.count

    def __getattr__(self, name):
        return getattr(self._st, name)


def fragment_groups(col: _Collect, block: ThreadGroup) -> dict:
    """The thread group each fragment is spread over (key -> group): the one group whose
    code uses it (the block for an unused one).  A fragment used by the code of two groups
    (two branches, or a branch and the whole block) raises ``LoweringError``: its elements
    would be numbered over different threads."""
    out = {}
    for b in col.fragments:
        uses = col.uses.get(key(b), {})
        if len(uses) > 1:
            (g1, w1), (g2, w2) = list(uses.items())[:2]
            raise LoweringError(
                f"fragment {b.name} is used by two thread groups: {g1} in {w1}, and {g2} in "
                f"{w2}; a fragment is spread over the threads of one group (the block, a "
                "T.ws region or a branch on the thread index), so use a fragment per group "
                "and hand values over through shared memory")
        out[key(b)] = next(iter(uses), block)
    return out


def infer(body, num_threads: int, target=None) -> tuple[_State, set, _Collect]:
    block = ThreadGroup(0, num_threads)
    col = _Collect(block)
    col.run(body)
    st = _State(target, num_threads, pass_config.current())
    groups = fragment_groups(col, block)

    def threads_of(buf) -> int:
        return groups.get(key(buf), block).count
    st.views = {key(v): (v, base) for v, base in col.views}
    st.shared_views = {key(v): (v, base) for v, base in col.shared_views}
    st.mma_sync_tiles = _mma_sync_tiles(col.ops, col.op_groups, st)
    # 1. fixed demands, stated by the ops; an op may record what it decided (a gemm's plan)
    for op, stmt, grp in zip(col.ops, col.op_stmts, col.op_groups):
        with at_source(op.span):  # errors name the op's line
            recorded = op.infer_layout(_InGroup(st, grp))
        if recorded is not None:
            st.recorded[key(stmt)] = recorded
    swizzle = st.resolve_shared() | _staging_swizzles(staging_tiles(body, col, st), col, st)
    # a fragment that scalar code reads is held whole by every thread (unless an op fixed it)
    for buf, idx in col.scalar_reads.values():
        if st.layout(buf) is None:
            st.demand(buf, replicated([int(x) for x in buf.shape], threads_of(buf)),
                      f"the read of {buf.name}[{', '.join(map(str, idx))}] outside T.Parallel")
    # 2. propagation, defaults for what stays free
    pending = [b for b in col.fragments]
    while True:
        st.changed = True
        while st.changed:
            st.changed = False
            _propagate(col, st)
        free = [b for b in pending if st.layout(b) is None]
        if not free:
            break
        # the largest free fragment first: reductions and projections derive the smaller ones
        b = max(free, key=lambda x: (_size(x), -pending.index(x)))
        # a loop with a barrier in its body keeps one iteration per thread where it can: a
        # thread running several would interleave them with the barrier (each iteration's
        # writes before the barrier would land before later iterations' reads)
        in_sync_loop = any(lp.synchronizes and any(key(x) == key(b) for x, _ in lp.accesses)
                           for lp in col.loops)
        vec = 1 if in_sync_loop else max(1, 16 // max(1, tvm.DataType(b.dtype).bits // 8))
        shape, spans = [int(s) for s in b.shape], _thread_spans(b, col)
        lay = elementwise(shape, threads_of(b), vec=vec, spans=spans)
        views = [v for v, base in col.views if key(base) == key(b)]
        if any(lay.reshaped([int(s) for s in v.shape]) is None for v in views):
            # padding to powers of two would break the digits its views regroup
            lay = elementwise(shape, threads_of(b), vec=vec, spans=spans, pad=False)
        st.demand(b, lay, "default")
    for lp in col.loops:
        if key(lp.node.loop_var) not in st.loops:
            st.loops[key(lp.node.loop_var)] = elementwise(
                [R.as_int(e) for e in lp.extents], (lp.group or block).count, vec=1)
    return st, swizzle, col


def staging_tiles(body, col: _Collect, st: _State) -> set:
    """Keys of the shared tiles that stage a fragment on its way elsewhere (the destination of
    a ``T.copy`` from a fragment) and that nothing but ``T.copy`` and TMA stores
    (``T.tma_copy`` of the tile to global memory) touches, with no layout of their own: they
    are stored in the conflict-free sm80 swizzle.  A fragment's rows land 8 at a time on one
    column of the tile, which row-major rows of 128 bytes or more would put on the same banks;
    the swizzle moves each row's 16-byte chunks to distinct banks and keeps every 16-byte
    vector whole, so the copies read and write it as they would rows."""
    from ..layout.swizzle import can_swizzle
    from ..ops.copy import Copy

    fixed = set(st.user_shared) | set(st.swizzled) | set(st.gmma) | set(st.shared_layouts)
    viewed = {key(t) for _, t in col.shared_views}
    copies = [(op, stmt) for op, stmt in zip(col.ops, col.op_stmts)
              if isinstance(op, Copy) or _tma_store_of(op) is not None]
    staged = {key(R.buffer_of(op.dst)) for op, _ in copies
              if isinstance(op, Copy) and is_fragment(R.buffer_of(op.src))
              and R.scope_of(op.dst) in SHARED}
    out = set()
    for b in col.shared:
        k = key(b)
        if k not in staged or k in fixed or k in viewed or len(b.shape) != 2 or \
                not all(isinstance(x, tirx.IntImm) for x in b.shape) or \
                not can_swizzle(int(b.shape[-1]), b.dtype):
            continue
        in_copies = sum(_mentions(stmt, b) for _, stmt in copies)
        if in_copies and in_copies == _mentions(body, b):
            out.add(k)
    return out


def _tma_store_of(op):
    """The shared tile that ``op`` stores to global memory if it is a ``T.tma_copy`` store,
    else None."""
    from ..ops.copy import TmaCopy

    if isinstance(op, TmaCopy) and R.scope_of(op.src) in SHARED and \
            R.scope_of(op.dst) == "global":
        return R.buffer_of(op.src)
    return None


def _staging_swizzles(staged: set, col: _Collect, st: _State) -> set:
    """The staging tiles (``staging_tiles``) that take the sm80 swizzle; where TMA is on
    (sm_90+), each tile whose rows a TMA/GMMA swizzle fits takes the widest such swizzle
    instead (in ``st.shared_layouts``): as free of bank conflicts for the fragment's writes,
    and one that a TMA store reads (``T.copy`` of the tile to global memory).  A tile that a
    ``T.tma_copy`` stores keeps its rows unless a TMA swizzle fits (TMA reads no other)."""
    from ..layout.swizzle import gmma_swizzle_bytes, make_gmma_swizzled_layout
    from ..ops.copy import tma_enabled

    tma_stored = {key(b) for b in map(_tma_store_of, col.ops) if b is not None}
    on = tma_enabled(st.target, st.config)
    out = set()
    for b in col.shared:
        k = key(b)
        if k not in staged:
            continue
        if on and gmma_swizzle_bytes(int(b.shape[-1]), b.dtype) is not None and \
                int(b.shape[-2]) % 8 == 0:
            st.shared_layouts[k] = codec.encode(make_gmma_swizzled_layout(b))
        elif k not in tma_stored:
            out.add(k)
    return out


def _mentions(node, buf) -> int:
    """How many times ``node`` names ``buf`` (allocations aside)."""
    n, k = 0, key(buf)

    def on_var(v):
        nonlocal n
        if key(v) == k:
            n += 1

    def on_alloc(a):  # the allocation itself is not a use
        return tvm_ffi.WalkResult.SKIP

    tvm_ffi.structural_walk(node, [(tirx.AllocBuffer, on_alloc), (tvm.ir.Var, on_var)],
                            order="pre")
    return n


def _thread_spans(buf, col: _Collect) -> list[int | None]:
    """How far the thread digits of each dim of a free fragment may reach (see
    ``elementwise``'s ``spans``), so that every ``T.Parallel`` access to it finds each element
    in one thread whatever the serial loops' values: a dim indexed by something fixed for the
    loop's iteration (a constant, a serial loop inside or around the loop) is held in
    registers (1); a window ``v + w * extent(v)`` keeps its threads inside ``extent(v)``
    (rounded down to a power of two); a loop variable leaves the dim free (``None``)."""
    spans: list[int | None] = [None] * len(buf.shape)

    def cap(d, n):
        spans[d] = n if spans[d] is None else min(spans[d], n)

    for lp in col.loops:
        for b, idx in lp.accesses:
            if key(b) != key(buf):
                continue
            for d, e in enumerate(idx):
                if isinstance(e, tvm.ir.Var) and any(key(e) == key(v) for v in lp.vars):
                    continue
                if _fixed_in_iteration(e, lp):
                    cap(d, 1)
                    continue
                k = _windowed_var(e, lp)
                if k is not None:
                    ext = R.as_int(lp.extents[k])
                    cap(d, 1 << (max(1, ext).bit_length() - 1))
    return spans


def _is_sm80_swizzle(lay) -> bool:
    """The conflict-free swizzle of the sm80 path (one panel per row), which the mma.sync gemm
    template reads; other swizzles (paneled GMMA layouts) are applied as index maps."""
    return isinstance(lay, SwizzledLayout) and not lay.paneled


def _size(buf) -> int:
    n = 1
    for s in buf.shape:
        n *= int(s)
    return n


def _loop_layout_from(lay: Fragment, idx, lp: _Loop) -> Fragment | None:
    """The loop's layout read off a fragment access: indices that are the loop vars (in any
    order), with dims indexed by serial loops inside the body (or constants) reduced away.
    An index ``v + w * extent(v)`` (``w`` fixed for the loop's run, e.g. an enclosing serial
    loop's variable) reads an aligned window of the dim: the loop takes the window's layout
    when every window lies in the same threads (the digits above it are registers)."""
    keys = [key(v) for v in lp.vars]
    pos, drop = [], []
    for d, e in enumerate(idx):
        if isinstance(e, tvm.ir.Var) and key(e) in keys:
            pos.append(keys.index(key(e)))
        elif _fixed_in_iteration(e, lp):
            # the same element for every thread that runs an iteration: only a dim held in
            # registers (a window of one index) serves every value of the index
            if lay.window(d, 1) is None:
                return None
            drop.append(d)
        else:
            k = _windowed_var(e, lp)
            if k is None:
                return None
            lay = lay.window(d, R.as_int(lp.extents[k]))
            if lay is None:
                return None
            pos.append(k)
    if sorted(pos) != list(range(len(lp.vars))):
        return None
    for d in reversed(drop):
        lay = lay.reduce(d)
    # indices that are the loop vars in another order (``b[j, i]``): the loop runs the
    # fragment's layout transposed
    return lay if pos == sorted(pos) else lay.permuted([pos.index(k) for k in range(len(pos))])


def _fixed_in_iteration(e, lp: _Loop) -> bool:
    """Whether index ``e`` uses none of the loop's own variables: a constant, a serial loop
    nested in the body, or a variable fixed for the loop's run (an enclosing serial loop)."""
    return not any(uses_var(e, v) for v in lp.vars)


def _coarsened_var(e, lp: _Loop) -> tuple[int, int] | None:
    """``(position, c)`` when ``e`` is ``v // c`` for loop var ``v`` and a constant ``c``."""
    if isinstance(e, tirx.FloorDiv) and isinstance(e.b, tirx.IntImm) and int(e.b) > 0 and \
            isinstance(e.a, tvm.ir.Var):
        keys = [key(v) for v in lp.vars]
        if key(e.a) in keys:
            return keys.index(key(e.a)), int(e.b)
    return None


def _windowed_var(e, lp: _Loop) -> int | None:
    """The position of loop var ``v`` when ``e`` is ``v + rest`` with ``rest`` a multiple of
    ``v``'s extent that no loop var (nor a serial loop inside the body) changes."""
    hits = [k for k, v in enumerate(lp.vars) if uses_var(e, v)]
    if len(hits) != 1:
        return None
    k, ext = hits[0], R.as_int(lp.extents[hits[0]])
    a = Analyzer()
    rest = a.simplify(e - lp.vars[k])
    if uses_var(rest, lp.vars[k]) or ext is None:
        return None
    inner = []
    tvm_ffi.structural_walk(rest, (tvm.ir.Var, inner.append))
    if any(key(v) in lp.inner for v in inner):
        return None
    if not is_zero(a.simplify(tirx.floormod(rest, ext))):
        return None
    return k


def _buffer_layout_from(loop_layout: Fragment, idx, lp: _Loop, buf) -> Fragment | None:
    """A fragment's layout read off a loop access.  Its indices are loop vars (in order), a
    loop var divided by a constant (``b[i, j // 2]``: the digits of ``j`` below 2 no longer
    tell elements apart, their threads become replicas), or are fixed for a thread's
    iteration: a constant, a serial loop nested in the body (``a[k, i]`` with ``for k in
    T.serial(n)`` inside) or around the loop.  The loop dims it does not use are reduced away
    (their threads become replicas); a fixed dim is held whole in registers by each thread,
    which then has every element its iterations read.  A loop that runs past the fragment's
    extent gives its layout clipped to the fragment (the indices beyond are padding)."""
    shape = [int(s) for s in buf.shape]
    keys = [key(v) for v in lp.vars]
    var_idx, held, coarse = [], {}, {}
    for d, e in enumerate(idx):
        if isinstance(e, tvm.ir.Var) and key(e) in keys:
            var_idx.append(e)
        elif _coarsened_var(e, lp) is not None:
            p, c = _coarsened_var(e, lp)
            var_idx.append(lp.vars[p])
            coarse[p] = c
        elif _fixed_in_iteration(e, lp):
            held[d] = shape[d]
        else:
            return None
    pos = _as_loop_vars(var_idx, lp.vars)
    if pos is None:
        return None
    lay = loop_layout
    for p, c in coarse.items():
        lay = lay.coarsen(p, c)
        if lay is None:
            return None
    for d in reversed(range(len(lp.vars))):
        if d not in pos:
            lay = lay.reduce(d)
    if held:
        lay = _insert_register_dims(lay, held)
    return lay if list(lay.shape) == shape else lay.resized(shape)


def _insert_register_dims(lay: Fragment, held: dict) -> Fragment:
    """``lay`` with dims inserted at the positions of ``held`` (position -> extent), each held
    whole in registers by every thread (register strides above the existing ones)."""
    dims, shape, src = [], [], iter(range(len(lay.shape)))
    stride = lay.num_regs
    for k in range(len(lay.shape) + len(held)):
        if k in held:
            dims.append([Factor(k, held[k], REG, stride if held[k] > 1 else 1)])
            shape.append(held[k])
            stride *= held[k]
        else:
            d = next(src)
            dims.append([Factor(k, x.extent, x.kind, x.stride) for x in lay.dims[d]])
            shape.append(lay.shape[d])
    return Fragment.from_factors(shape, dims, lay.replicas, name=lay.name)


def _propagate(col: _Collect, st: _State) -> None:
    for op, grp in zip(col.ops, col.op_groups):
        with at_source(op.span):  # errors name the op's line
            op.propagate_layout(_InGroup(st, grp))
    for lp in col.loops:
        lk = key(lp.node.loop_var)
        extents = [R.as_int(e) for e in lp.extents]
        if lk not in st.loops:
            # a loop that writes a replicated fragment runs on every thread that holds it
            # (each writes its own copy), so such a fragment decides the loop's layout first
            first = [a for a in lp.accesses if key(a[0]) in lp.stored and
                     st.layout(a[0]) is not None and st.layout(a[0]).replicas]
            derived = [_loop_layout_from(st.layout(buf), idx, lp)
                       for buf, idx in first + lp.accesses if st.layout(buf) is not None]
            derived = [d for d in derived if d is not None]
            # a fragment of the loop's shape first; else one whose digits cover the loop (a
            # loop over part of a fragment, or past the end of one padded to it)
            fits = [d for d in derived if list(d.shape) == extents] or \
                [r for r in (d.resized(extents) for d in derived) if r is not None]
            if fits:
                st.loops[lk] = fits[0]
                st.changed = True
        loop_layout = st.loops.get(lk)
        if loop_layout is None:
            continue
        for buf, idx in lp.accesses:
            if st.layout(buf) is not None:
                continue
            lay = _buffer_layout_from(loop_layout, idx, lp, buf)
            if lay is not None:
                st.demand(buf, lay, f"the T.Parallel loop over {extents}")


class _Annotate(StmtMutator):
    def __init__(self, st: _State, swizzle: set):
        self.st, self.swizzle = st, swizzle

    def visit_AllocBuffer(self, s):
        b = s.buffer
        lay = self.st.layout(b) if is_fragment(b) else None
        ann = dict(s.annotations)
        if lay is not None:
            ann["tl.layout"] = codec.encode(lay)
        elif key(b) in self.swizzle:
            ann["tl.swizzle"] = 1
        elif key(b) in self.st.shared_layouts:
            ann["tl.shared_layout"] = self.st.shared_layouts[key(b)]
        else:
            return s
        return tirx.AllocBuffer(b, annotations=ann)

    def visit_Evaluate(self, s):
        op = self.st.recorded.get(key(s))
        return s if op is None else tirx.Evaluate(op.to_call(), span=s.span)

    def visit_For(self, s):
        lay = self.st.loops.get(key(s.loop_var))
        if lay is None or s.kind != tirx.ForKind.PARALLEL:
            return self.generic(s)
        ann = dict(s.annotations)
        ann["tl.loop_layout"] = codec.encode(lay)
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, s.body, s.thread_binding, ann, s.step)


def _check_thread_dims(body, col: _Collect) -> None:
    """More than 1024 threads is an error.  A ``threads=(x, y[, z])`` block is kept as the
    user wrote it (``T.get_thread_binding(1)`` is ``threadIdx.y``, ``tvm_thread_allreduce``
    over it works) while the kernel's tile work is per thread: no fragments, no
    ``T.Parallel`` loops, tile operators on per-thread buffers or single elements only.
    Tiles spread over the block need a 1-D block (``threads=N``)."""
    n = num_threads_of(body)
    if n > 1024:
        raise LoweringError(f"T.Kernel asks for {n} threads per block; CUDA allows at most 1024")
    dims = [a for a in _attrs(body) if a.attr_key == "thread_extent" and
            a.node.thread_tag in ("threadIdx.y", "threadIdx.z") and
            not (isinstance(a.value, tirx.IntImm) and int(a.value) == 1)]
    if not dims:
        return
    spread = [f"fragment {b.name}" for b in col.fragments]
    spread += [f"the T.Parallel loop over {[R.as_int(e) for e in lp.extents]}" for lp in col.loops]
    spread += [type(op).__name__ for op in col.ops if not _per_thread(op)]
    if spread:
        a = dims[0]
        raise LoweringError(
            f"{spread[0]} is spread over the block's threads, which the CUDA lowering numbers "
            f"along a 1-D block; this kernel has {a.node.thread_tag} = {a.value} (write "
            "threads=N instead of a tuple, and T.get_thread_binding(0) % x etc. for the 2-D "
            "index)")


def _per_thread(op) -> bool:
    """Whether a tile op's regions all lie in per-thread buffers or are single elements."""
    regions = [v for v in vars(op).values() if isinstance(v, tvm.ir.TensorRegion)]
    if not regions:
        return False
    for r in regions:
        if R.buffer_of(r).scope() in ("local", "local.var"):
            continue
        if not all(isinstance(e, tirx.IntImm) and int(e) == 1 for e in R.extents(r)):
            return False
    return True


class _BoundParallelExtents(StmtMutator):
    """A ``T.Parallel`` loop whose extent is symbolic but bounded by a constant
    (``T.Parallel(T.min(valid_len, 512))``) runs over the bound, its body guarded by
    ``i < extent`` at the innermost level of the nest, so that its iterations can be laid out
    over threads when the kernel is compiled."""

    LIMIT = 1 << 16

    def visit_For(self, s):
        if s.kind != tirx.ForKind.PARALLEL:
            return self.generic(s)
        levels, body = [], s
        while isinstance(body, tirx.For) and body.kind == tirx.ForKind.PARALLEL:
            levels.append(body)
            body = body.body
        ana, exts, guards = Analyzer(), [], []
        for lp in levels:
            e = lp.extent
            bound = None if isinstance(e, tirx.IntImm) else ana.const_int_bound(e).max_value
            if bound is not None and 0 < bound <= self.LIMIT and _starts_at_zero(lp):
                exts.append(tirx.IntImm(e.dtype, int(bound)))
                guards.append(tirx.LT(lp.loop_var, e))
            else:
                exts.append(e)
        body = self(body)
        if guards:
            cond = guards[0]
            for g in guards[1:]:
                cond = tirx.And(cond, g)
            body = tirx.IfThenElse(cond, body, None, span=s.span)
        for lp, e in reversed(list(zip(levels, exts))):
            body = tirx.For(lp.loop_var, lp.min, e, lp.kind, body, lp.thread_binding,
                            lp.annotations, lp.step, span=lp.span)
        return body


def _starts_at_zero(loop: tirx.For) -> bool:
    return isinstance(loop.min, tirx.IntImm) and int(loop.min) == 0


@function_pass("tl.LayoutInference")
def LayoutInference(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    target = target_of(func)

    def one(kernel):  # each T.Kernel has its own threads and fragments
        kernel = _BoundParallelExtents()(kernel)
        kernel = derive_thread_groups(kernel)  # warp-group branches become T.ws regions
        col = _Collect()
        col.run(kernel)
        _check_thread_dims(kernel, col)
        st, swizzle, _ = infer(kernel, num_threads_of(kernel), target)
        return _Annotate(st, swizzle)(kernel)

    return func.with_body(map_kernels(func.body, one))


def shared_layout_of(alloc) -> "Layout | None":
    """The layout a shared tile's allocation is stored in after PlanSharedMemory: its
    ``tl.shared_layout`` (a wgmma operand's GMMA swizzle, or a ``T.annotate_layout``), the sm80
    swizzle for ``tl.swizzle``, else ``None`` (row-major).  ``swizzle_bytes`` on the result
    says which TMA/GMMA swizzle mode it equals (``None``: none can produce it)."""
    from ..layout.swizzle import can_swizzle, make_swizzled_layout

    ann = alloc.annotations
    if "tl.shared_layout" in ann:
        return codec.decode(ann["tl.shared_layout"])
    b = alloc.buffer
    if "tl.swizzle" in ann and can_swizzle(int(b.shape[-1]), b.dtype):
        return make_swizzled_layout(b)
    return None
