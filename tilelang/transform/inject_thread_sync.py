"""``InjectThreadSync``: put barriers where the threads of a thread group hand shared data to
each other.

Expects: lowered kernels (explicit shared accesses, per-thread loops from
``LowerParallelLoops``, device ops with declared effects, ``T.ws`` regions).  Guarantees:
between a statement that writes a shared tile (or a global tensor the kernel also reads,
``_handed_globals``) and a later one that reads or writes it (and between a read and a later
write) there is a barrier over the threads involved:

* inside code run by one group (the block, or a ``T.ws`` region) a barrier of that group
  (the block's: id 0, ``__syncthreads``; a smaller group's: its named barrier
  ``bar.sync id, count``) before the later statement;
* between sibling ``T.ws`` regions of two groups, a named barrier over exactly the threads of
  both groups, placed at the end of the earlier region and at the start of the later one
  (each group reaches it in its own code); ids come from ``BarrierIds`` of the kernel;
* the regions of one branch chain on the thread index (``tl.thread_branches``, see
  ``thread_branches``) run at the same time: each is synchronized on its own group, the chain
  with the code around it like one statement, never one branch with another.

A loop-carried hazard gets a barrier of the group running the loop before the first
statement of the body that conflicts with the end of the previous iteration.  Analysis is
per tile (not per element), so it errs towards more barriers.  Barriers are only placed in
code uniform over the group: never inside per-thread loops or under other conditions on the
thread index.  Accesses are read from loads/stores and from the declared effects of device
ops: the writes of an op that completes asynchronously (cp.async) are left to the protocol
that issued it (its reads, such as a TMA store's of its tile, count, and last until a wait on
its mechanism, which counts as a read of every tile such ops read), an op with a barrier
at entry (a cross-warp all-reduce) needs none before it, and a barrier op ends the hazards
of its group.  The user's block barriers in a warp-specialized kernel's consumer body
(``CONSUMER_BODY_ATTR``) become the consumer group's: the producer never reaches them.
CPU: unchanged.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..device import sm80 as device
from ..device.effects import Mechanism, accessed_buffers, effect_of
from ..device.thread_group import CONSUMER_BODY_ATTR, BarrierIds, ThreadGroup, group_of
from ..engine.target import is_cpu
from ..errors import LoweringError
from ..ir_utils import launch_chain, map_kernels, thread_extent, uses_var
from ..language.view import view_roots
from .lower_parallel_loops import PARTITIONED
from .passes import function_pass, target_of
from .plan_shared_memory import planned_views
from .thread_branches import BRANCHES_ATTR, branch_regions

SHARED = ("shared", "shared.dyn")


def _key(x):
    return x.__chandle__()


def _barrier_of(stmt):
    """(id, count) when ``stmt`` is a barrier op, else ``None``."""
    eff = effect_of(stmt)
    if eff is None or eff.sync is None or eff.sync.barrier_arg is None:
        return None
    return device.barrier_group(stmt.value)


def _contains_barrier(stmt) -> bool:
    hit = []

    def on_call(c):
        eff = effect_of(c)
        if eff is not None and eff.sync is not None and eff.sync.barrier_arg is not None:
            hit.append(c)

    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, on_call))
    return bool(hit)


def _async_reads(kernel) -> dict:
    """mechanism -> the shared tiles that ops completing on it read (a TMA store's tile, a
    wgmma's operands) anywhere in ``kernel``."""
    out: dict = {}

    def on_call(c):
        eff = effect_of(c)
        if eff is not None and eff.completes_on is not None:
            for acc in eff.accesses:
                if not acc.write:
                    out.setdefault(eff.completes_on, set()).update(
                        _key(b) for b in accessed_buffers(c, acc) if b.scope() in SHARED)

    tvm_ffi.structural_walk(kernel, (tvm.ir.Call, on_call))
    return out


def _handed_globals(kernel, roots: dict) -> frozenset:
    """The global tensors (by the handle of the tensor a view is of, ``roots``) that
    ``kernel`` writes and also reads, other than only atomically both: its threads may hand
    data to each other through them as through shared tiles, so they are synchronized alike.
    A tensor that is only written (an output), or only updated atomically, needs no barrier."""
    plain_w, plain_r, atomic = set(), set(), set()

    def root(b):
        return roots.get(_key(b), _key(b))

    def on_load(x):
        if x.source.scope() == "global":
            plain_r.add(root(x.source))

    def on_store(s):
        if s.buffer.scope() == "global":
            plain_w.add(root(s.buffer))

    def on_call(c):
        eff = effect_of(c)
        if eff is None:
            return None
        for acc in eff.accesses:
            for b in accessed_buffers(c, acc):
                if b.scope() == "global":
                    (atomic if eff.atomic else plain_w if acc.write else plain_r).add(root(b))
        return tvm_ffi.WalkResult.SKIP  # its address arguments are not reads

    tvm_ffi.structural_walk(kernel, [(tvm.ir.Call, on_call), (tvm.ir.TensorLoad, on_load),
                                     (tirx.BufferStore, on_store)], order="pre")
    return frozenset((plain_w & (plain_r | atomic)) | (atomic & plain_r))


def _rw(stmt, aliases: dict | None = None, async_reads: dict | None = None,
        handed: frozenset = frozenset()) -> tuple[set, set, bool]:
    """Shared tiles (and the global tensors in ``handed``) ``stmt`` reads and writes, and
    whether it synchronizes its group at entry (a device op that does so before its own
    accesses).  An asynchronous write counts
    when ``stmt`` also waits on the mechanism it completes on (a TMA load waited for in the
    same code): from the wait on, the tile holds data that other threads may need; a write
    whose wait lies elsewhere belongs to the pipeline protocol that issued it.  An
    asynchronous read lasts until the wait on its mechanism: the wait counts as a read of
    every tile such ops read (``async_reads``), so a later write by another thread waits for
    the barrier after it, not just for one after the issue."""
    reads, writes, entry = set(), set(), []
    pending: dict = {}  # mechanism -> shared tiles written asynchronously
    waited: set = set()

    def kept(b) -> bool:
        return b.scope() in SHARED or (aliases or {}).get(_key(b), _key(b)) in handed

    def on_load(x):
        if kept(x.source):
            reads.add(_key(x.source))

    def on_store(s):
        if kept(s.buffer):
            writes.add(_key(s.buffer))

    def on_call(c):
        eff = effect_of(c)
        if eff is None:
            return None
        if eff.waits is not None:
            waited.add(eff.waits)
            reads.update((async_reads or {}).get(eff.waits, ()))
        if eff.completes_on is not None:
            # its writes are published by the wait on its mechanism (below), or by the protocol
            # that issued it; its reads (a TMA store's of its tile) start after it is issued,
            # so earlier writes of the tile must be ordered before it like a plain read's
            for acc in eff.accesses:
                bufs = {_key(b) for b in accessed_buffers(c, acc) if kept(b)}
                if acc.write:
                    pending.setdefault(eff.completes_on, set()).update(bufs)
                else:
                    reads.update(bufs)
            return tvm_ffi.WalkResult.SKIP
        if eff.sync is not None and eff.sync.at_entry:
            entry.append(c)
        for acc in eff.accesses:
            for b in accessed_buffers(c, acc):
                if kept(b):
                    (writes if acc.write else reads).add(_key(b))
        return None

    tvm_ffi.structural_walk(stmt, [(tvm.ir.Call, on_call), (tvm.ir.TensorLoad, on_load),
                                   (tirx.BufferStore, on_store)], order="pre")
    for mech in waited:
        writes |= pending.get(mech, set())
    if aliases:  # a view of a tile (T.view / T.reshape) is the tile's bytes
        reads, writes = ({aliases.get(k, k) for k in ks} for ks in (reads, writes))
    return reads, writes, bool(entry)


class _State:
    """Accesses since the last barrier: ``buffer key -> {(group, origin)}`` for reads and
    writes; ``origin`` is the index of the ``T.ws`` region of the current statement sequence
    that made the access, ``None`` for any other statement."""

    def __init__(self, r=None, w=None):
        self.r = {k: set(v) for k, v in (r or {}).items()}
        self.w = {k: set(v) for k, v in (w or {}).items()}

    def union(self, o):
        out = self.copy()
        for mine, theirs in ((out.r, o.r), (out.w, o.w)):
            for k, v in theirs.items():
                mine.setdefault(k, set()).update(v)
        return out

    def copy(self):
        return _State(self.r, self.w)

    def add(self, reads, writes, group, origin=None):
        for k in reads:
            self.r.setdefault(k, set()).add((group, origin))
        for k in writes:
            self.w.setdefault(k, set()).add((group, origin))

    def conflicts(self, reads, writes) -> set:
        """(group, origin) of the earlier accesses a statement with these accesses races."""
        out = set()
        for k in set(reads) | set(writes):
            out |= self.w.get(k, set())
        for k in writes:
            out |= self.r.get(k, set())
        return out

    def without_origins(self):
        strip = lambda d: {k: {(g, None) for g, _ in v} for k, v in d.items()}  # noqa: E731
        return _State(strip(self.r), strip(self.w))

    def drop_groups(self, groups):
        keep = lambda d: {k: {x for x in v if x[0] not in groups} for k, v in d.items()}  # noqa: E731
        return _State(keep(self.r), keep(self.w))


class _Sync:
    def __init__(self, tx, block: ThreadGroup, aliases: dict | None = None,
                 async_reads: dict | None = None, handed: frozenset = frozenset(),
                 one_thread: bool = False):
        self.tx = tx
        self.handed = handed  # global tensors synchronized like tiles (``_handed_globals``)
        self.one_thread = one_thread  # the block is one thread: nothing to order
        self.aliases = aliases  # view key -> key of the tile it is the bytes of
        self.async_reads = async_reads  # mechanism -> tiles its ops read (``_async_reads``)
        self.block = block
        self.ids = BarrierIds(block)
        self.group = block  # the group running the code being analysed
        self.user_code = False  # in a warp-specialized kernel's consumer body

    def barrier(self, group: ThreadGroup, divergent: bool = False) -> tirx.Stmt:
        return tirx.Evaluate(device.barrier(self.ids.of(group, divergent), group.count))

    def uniform(self, expr) -> bool:
        return self.tx is None or not uses_var(expr, self.tx)

    def block_level(self, s) -> bool:
        if isinstance(s, (tirx.SeqStmt, tirx.AttrStmt)):
            return True
        if isinstance(s, tirx.For):  # serial loops and the user's T.unroll; not the
            # per-thread register loops a T.Parallel nest became
            return s.kind == tirx.ForKind.SERIAL or _contains_barrier(s.body) or \
                (s.kind == tirx.ForKind.UNROLLED and PARTITIONED not in s.annotations)
        if isinstance(s, tirx.IfThenElse):
            return self.uniform(s.condition)
        return False

    def stmt(self, s, st: _State):
        """(new statement, state after it)."""
        bar = _barrier_of(s)
        if bar is not None:
            if self.user_code and bar[0] == 0:  # the user's block is the consumer group now
                return self.barrier(self.group), _State()
            return s, (_State() if bar[1] >= self.group.count else st)
        if isinstance(s, tirx.SeqStmt):
            return self.sequence(list(s.seq), st)
        if group_of(s) is not None:
            return self.sequence([s], st)
        if branch_regions(s) is not None:
            return self.branches(s, st)
        if self.block_level(s) and (_contains_barrier(s) or self._has_shared(s)):
            if isinstance(s, tirx.AttrStmt):
                outer, self.user_code = self.user_code, \
                    self.user_code or s.attr_key == CONSUMER_BODY_ATTR
                b, st = self.stmt(s.body, st)
                self.user_code = outer
                return tirx.AttrStmt(s.node, s.attr_key, s.value, b), st
            if isinstance(s, tirx.IfThenElse):
                t, st_t = self.stmt(s.then_case, st.copy())
                e, st_e = (self.stmt(s.else_case, st.copy()) if s.else_case is not None
                           else (None, st))
                return tirx.IfThenElse(s.condition, t, e), st_t.union(st_e)
            if isinstance(s, tirx.For):
                _, end = self.stmt(s.body, st.copy())
                body, end = self.stmt(s.body, st.union(end.without_origins()))
                return (tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding,
                                 s.annotations, s.step), st.union(end))
        r, w, entry = _rw(s, self.aliases, self.async_reads, self.handed)
        if entry:
            st = _State()
        elif st.conflicts(r, w) and not self.one_thread:
            out = _State()
            out.add(r, w, self.group)
            return tirx.SeqStmt([self.barrier(self.group), s]), out
        st = st.copy()
        st.add(r, w, self.group)
        return s, st

    # sequences with T.ws regions ---------------------------------------------------------
    def sequence(self, items: list, st: _State):
        out: list = []
        head: dict[int, list] = {}  # region index -> barriers at its start
        tail: dict[int, list] = {}  # region index -> barriers at its end
        for x in items:
            g = group_of(x)
            if g is None:
                y, st = self.stmt(x, st)
                out.append(y)
                continue
            region, inner = self.region(x, g)
            r, w = inner
            hits = st.conflicts(r, w)
            if hits and _mbarrier_hand_off(x, [out[h[1]] for h in hits
                                               if h[0] != g and h[1] is not None]):
                st = st.drop_groups({h[0] for h in hits} | {g})  # the mbarriers order them
                hits = None
            if hits:
                st = self.hand_off(g, len(out), hits, st, head, tail, out)
            i = len(out)
            st.add(r, w, g, origin=i)
            out.append(region)
        for i, bars in head.items():
            out[i] = _in_region(out[i], bars, [])
        for i, bars in tail.items():
            out[i] = _in_region(out[i], [], bars)
        return tirx.SeqStmt(out) if len(out) != 1 else out[0], st.without_origins()

    def region(self, attr, g: ThreadGroup):
        """The region analysed on its own group: (rewritten region, (reads, writes))."""
        if not self.group.contains(g):
            raise LoweringError(f"T.ws region on {g} is nested in code run by {self.group}")
        cond = attr.body
        old, self.group = self.group, g
        try:
            body, _ = self.stmt(cond.then_case, _State())
        finally:
            self.group = old
        r, w, _ = _rw(cond.then_case, self.aliases, self.async_reads, self.handed)
        return (tirx.AttrStmt(attr.node, attr.attr_key, attr.value,
                              tirx.IfThenElse(cond.condition, body, cond.else_case)), (r, w))

    def branches(self, attr, st: _State):
        """A branch chain: each region analysed on its own group; towards the code around
        it the chain is one statement (a barrier of the running group before it when it
        conflicts with what came before)."""
        out, reads, writes = [], set(), set()
        for x in branch_regions(attr):
            y, (r, w) = self.region(x, group_of(x))
            out.append(y)
            reads |= r
            writes |= w
        chain = tirx.AttrStmt(attr.node, BRANCHES_ATTR, attr.value, tirx.SeqStmt(out)
                              if len(out) > 1 else out[0])
        if st.conflicts(reads, writes):
            after = _State()
            after.add(reads, writes, self.group)
            return tirx.SeqStmt([self.barrier(self.group), chain]), after
        st = st.copy()
        st.add(reads, writes, self.group)
        return chain, st

    def hand_off(self, g, i, hits, st, head, tail, out):
        """Synchronize region ``i`` (group ``g``) with the earlier accesses ``hits``."""
        others = {h for h in hits if h[0] != g}
        same = hits - others
        if others:
            groups = {h[0] for h in others}
            origins = {h[1] for h in others}
            union = next(iter(groups)).union(g) if len(groups) == 1 else None
            if union is None or None in origins or union.count != g.count + \
                    next(iter(groups)).count or not self.group.contains(union):
                # not a plain hand-off between two sibling regions: a barrier of the running
                # group before the region (the region's index moves by one)
                out.append(self.barrier(self.group))
                return _State()
            j = max(origins)
            head.setdefault(i, []).append(self.barrier(union, divergent=True))
            tail.setdefault(j, []).append(self.barrier(union, divergent=True))
            st = st.drop_groups(groups | {g})
            return st
        if same:
            head.setdefault(i, []).append(self.barrier(g))
            st = st.drop_groups({g})
        return st

    def _has_shared(self, s) -> bool:
        r, w, _ = _rw(s, self.aliases, handed=self.handed)
        return bool(r or w)


def _mbarrier_hand_off(later, earlier: list) -> bool:
    """Whether sibling regions hand data over through mbarriers (every earlier region arrives
    on one, the later one waits on one): the user's or a protocol's barriers order them, and
    a named barrier over both groups would deadlock loops that run concurrently."""

    def has(stmt, what):
        hit = []

        def on_call(c):
            eff = effect_of(c)
            if eff is not None and getattr(eff, what) == Mechanism.MBARRIER:
                hit.append(c)

        tvm_ffi.structural_walk(stmt, (tvm.ir.Call, on_call))
        return bool(hit)

    return bool(earlier) and has(later, "waits") and all(has(e, "commits") for e in earlier)


def _in_region(attr, before: list, after: list):
    cond = attr.body
    body = tirx.SeqStmt(before + [cond.then_case] + after)
    return tirx.AttrStmt(attr.node, attr.attr_key, attr.value,
                         tirx.IfThenElse(cond.condition, body, cond.else_case))


@function_pass("tl.InjectThreadSync")
def InjectThreadSync(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func

    def one(kernel):  # each T.Kernel synchronizes its own block
        tx, ext = thread_extent(kernel)
        block = ThreadGroup(0, int(ext) if isinstance(ext, tirx.IntImm) else 1)
        roots = view_roots(kernel)
        one_thread = all(isinstance(a.value, tirx.IntImm) and int(a.value) == 1
                         for a in launch_chain(kernel)[0] if a.attr_key == "thread_extent"
                         and a.node.thread_tag.startswith("threadIdx"))
        body, _ = _Sync(tx, block, {**planned_views(kernel), **roots}, _async_reads(kernel),
                        _handed_globals(kernel, roots), one_thread).stmt(kernel, _State())
        return body

    return func.with_body(map_kernels(func.body, one))
