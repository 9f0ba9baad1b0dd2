"""``InjectAsyncWaits``: wait for asynchronous register operations before their data is used,
and no longer than that.

Expects: lowered kernels (per-thread register arrays, device ops with declared effects); the
staged tiles of pipelines carry ``STAGED`` (their leading dimension is the ring slot).
Guarantees: ops that complete on a wait-group mechanism (``Effect.completes_on``; today
``wgmma`` groups) make the *regions* they access (a tile, or one ring slot of a staged tile:
``A_s[slot, ...]``) in flight in the current group of the mechanism; ``commit`` closes the
group; a wait of the mechanism with ``pending = N`` completes all but the newest ``N`` closed
groups.  Before the first later statement (of the same sequence, or of a later iteration of an
enclosing loop) that loads, stores or passes an in-flight region to another op, or hands it
over (``Effect.releases``: the arrival that gives a ring slot back to its producer), a wait is
inserted whose ``pending`` is the number of closed groups newer than the newest one holding
that region.  Two slots of a staged tile are different regions when their indices provably
differ (``(base + k) % n`` against ``(base + k - 1) % n``): so a consumer that hands back the
slot of iteration ``k - 1`` after issuing iteration ``k``'s wgmmas waits with ``pending = 1``
and keeps the tensor cores busy.  Ops of the same mechanism (the next wgmma into the same
accumulator) are ordered by the hardware and need no wait.  Mechanisms whose completion the
issuing protocol waits for (``Mechanism.protocol_owned``: cp.async groups of a pipeline,
mbarriers) are left to it.  Across a loop's back edge the regions of iteration ``k`` become
those of ``k - 1``. A wait under an ``if``, or in a loop that may not run, completes nothing on
the other path: the states after both paths are merged; so are the states at a loop's ``break``
(after the loop) and ``continue`` (at its back edge). Groups belong to the thread that issued
them, and a branch on the thread index alone (``tx == 0``) sends each thread the same way
every time: such a branch splits the threads into classes whose states are never merged, so
the leader's groups are not lined up with the other threads' (none), and a wait only the
leader runs counts for it. A wait ``pending = N`` with fewer than ``N`` groups in flight
completes none. A view of a tile (``T.view``,
``T.reshape``) is the tile. Groups still in flight at a kernel's end are waited for there (a
block's shared memory goes away when it exits; a TMA store nobody waited for may still read its
tile). The pass reasons from effects only. CPU: unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from ..device.effects import all_device_ops, effect_of
from ..engine.target import is_cpu
from ..ir_utils import map_kernels, substitute, thread_extent
from ..language.view import views_of_tiles
from ..utils.np_eval import NotEvaluable, np_eval
from .passes import function_pass, target_of

# Annotation of a staged tile's allocation (``InjectSoftwarePipeline``): the ring depth of its
# leading dimension.
STAGED = "tl.pipeline_stages"

_analyzer = Analyzer()


def _key(x):
    return x.__chandle__()


def _waiter(mechanism):
    """The device op that waits on ``mechanism`` with a pending count."""
    for d in all_device_ops().values():
        if d.effect.waits == mechanism and d.effect.pending_arg is not None:
            return d
    return None


def _wait(mechanism, pending: int) -> tirx.Stmt:
    """Wait until at most ``pending`` closed groups of ``mechanism`` are in flight."""
    return tirx.Evaluate(tvm.ir.Call(_waiter(mechanism).op, [tirx.const(pending, "int32")],
                                     ret_ty="int32"))


def _tracked(mechanism) -> bool:
    """Whether this pass waits for ``mechanism``: it has a group wait, and no protocol of its
    own waits for it."""
    return mechanism is not None and not mechanism.protocol_owned and \
        _waiter(mechanism) is not None


@dataclass(frozen=True, eq=False)
class Region:
    """A tile (``slot is None``) or one ring slot of a staged tile (equal when they print the
    same: the slot is an expression)."""

    tile: int
    slot: object = None
    ring: int = 0

    def __eq__(self, other) -> bool:
        return isinstance(other, Region) and self.text() == other.text()

    def __hash__(self) -> int:
        return hash(self.text())

    def overlaps(self, other: "Region") -> bool:
        if self.tile != other.tile:
            return False
        if self.slot is None or other.slot is None:
            return True
        return not _differ(self.slot, other.slot, self.ring)

    def shifted(self, var, by) -> "Region":
        if self.slot is None:
            return self
        return Region(self.tile, substitute(self.slot, {var: by}), self.ring)

    def text(self) -> str:
        return f"{self.tile}:{self.slot}"


def _differ(a, b, ring: int) -> bool:
    """Whether two slot indices of a ring of ``ring`` slots provably differ."""
    if isinstance(a, tirx.IntImm) and isinstance(b, tirx.IntImm):
        return int(a.value) != int(b.value)
    if ring and isinstance(a, tirx.FloorMod) and isinstance(b, tirx.FloorMod) and \
            isinstance(a.b, tirx.IntImm) and isinstance(b.b, tirx.IntImm) and \
            int(a.b.value) == int(b.b.value) == ring:
        d = _analyzer.simplify(a.a - b.a)
        return isinstance(d, tirx.IntImm) and int(d.value) % ring != 0
    return False


class _Tiles:
    """The staged tiles of a function (key -> ring depth) and the regions an access names."""

    def __init__(self, body):
        self.ring: dict = {}

        def on_alloc(a):
            if STAGED in a.annotations:
                self.ring[_key(a.buffer)] = int(a.annotations[STAGED])

        tvm_ffi.structural_walk(body, (tirx.AllocBuffer, on_alloc))
        self.tile_of: dict = {}  # the key of a view -> its tile's
        for view, tile in views_of_tiles(body):
            self.tile_of[_key(view)] = self.tile_of.get(_key(tile), _key(tile))

    def region(self, buf, indices) -> Region:
        """A view of a tile (``T.view``, ``T.reshape``) names the tile (all of it, for a view
        of a staged tile)."""
        ring = self.ring.get(_key(buf))
        if ring and indices:
            return Region(_key(buf), indices[0], ring)
        return Region(self.tile_of.get(_key(buf), _key(buf)))

    def addressed(self, call, positions) -> set:
        """Regions of the ``address_of(tile[...])`` arguments at ``positions`` (also inside a
        descriptor built from one)."""
        out = set()

        def on_call(c):
            if isinstance(c.op, tvm.ir.Op) and c.op.name == "tirx.address_of" and \
                    isinstance(c.args[0], tvm.ir.TensorLoad):
                out.add(self.region(c.args[0].source, list(c.args[0].indices)))

        for i in positions:
            tvm_ffi.structural_walk(call.args[i], (tvm.ir.Call, on_call))
        return out

    def touched(self, stmt, mechanism) -> set:
        """Regions ``stmt`` accesses (or hands over) other than through async ops of
        ``mechanism``."""
        out = set()

        in_op = [0]  # inside a device op: an address it is given is no use but a declared one

        def on_call(c):
            eff = effect_of(c)
            if eff is not None and eff.completes_on == mechanism:
                return tvm_ffi.WalkResult.SKIP
            if eff is not None:
                for acc in eff.accesses:
                    out.update(self.addressed(c, acc.args))
                if eff.releases is not None:
                    out.update(self.addressed(c, range(eff.releases, len(c.args))))
                in_op[0] += 1
                for a in c.args:
                    tvm_ffi.structural_walk(a, walkers, order="pre")
                in_op[0] -= 1
                return tvm_ffi.WalkResult.SKIP
            if in_op[0] and isinstance(c.op, tvm.ir.Op) and c.op.name == "tirx.address_of" \
                    and isinstance(c.args[0], tvm.ir.TensorLoad):
                for i in c.args[0].indices:  # the address's indices are still read
                    tvm_ffi.structural_walk(i, walkers, order="pre")
                return tvm_ffi.WalkResult.SKIP
            return None

        def on_load(x):
            out.add(self.region(x.source, list(x.indices)))

        def on_store(s):
            out.add(self.region(s.buffer, list(s.indices)))

        walkers = [(tvm.ir.Call, on_call), (tvm.ir.TensorLoad, on_load),
                   (tirx.BufferStore, on_store)]
        tvm_ffi.structural_walk(stmt, walkers, order="pre")
        return out


@dataclass
class _Flight:
    """The groups of one mechanism in flight: ``closed`` (oldest first) and the ``open`` one
    (issued, not committed yet)."""

    closed: list = field(default_factory=list)
    open: set = field(default_factory=set)

    def copy(self) -> "_Flight":
        return _Flight([set(g) for g in self.closed], set(self.open))

    def empty(self) -> bool:
        return not self.open and not any(self.closed)

    def map(self, fn) -> "_Flight":
        return _Flight([{fn(r) for r in g} for g in self.closed], {fn(r) for r in self.open})

    def widened(self) -> "_Flight":
        """One group holding every region as a whole tile: waits at least as long."""
        whole = {Region(r.tile) for g in self.closed for r in g}
        return _Flight([whole] if whole else [], {Region(r.tile) for r in self.open})

    def signature(self) -> tuple:
        return (tuple(tuple(sorted(r.text() for r in g)) for g in self.closed),
                tuple(sorted(r.text() for r in self.open)))


def _merge_flights(a: dict, b: dict) -> dict:
    """The groups in flight after either of two paths of one thread: aligned from the newest."""
    out = {}
    for m in list(a) + [m for m in b if m not in a]:
        x, y = a.get(m, _Flight()), b.get(m, _Flight())
        n = max(len(x.closed), len(y.closed))
        xs = [set()] * (n - len(x.closed)) + x.closed
        ys = [set()] * (n - len(y.closed)) + y.closed
        out[m] = _Flight([p | q for p, q in zip(xs, ys)], x.open | y.open)
    return out


# A state: for each class of threads that may be here (the key: the class's threads, packed
# bits of ``threadIdx.x``; ``b""`` when the threads are unknown), its groups in flight
# (mechanism -> ``_Flight``).  Groups belong to the thread that issued them, and a branch on
# the thread index alone sends each thread the same way every time: so the paths of different
# threads are kept apart, and only paths the same thread may take are merged.
_MAX_CLASSES = 8


def _merge(a: dict, b: dict) -> dict:
    """The state after either of two paths."""
    out = {k: dict(v) for k, v in a.items()}
    for k, v in b.items():
        out[k] = _merge_flights(out[k], v) if k in out else dict(v)
    return out


def _copy(state: dict) -> dict:
    return {k: {m: f.copy() for m, f in flights.items()} for k, flights in state.items()}


def _mapped(state: dict, fn) -> dict:
    """``state`` with ``fn`` applied to every region."""
    return {k: {m: f.map(fn) for m, f in flights.items()} for k, flights in state.items()}


def _signature(state: dict) -> tuple:
    return tuple(sorted(
        (k, tuple(sorted((m.value, f.signature()) for m, f in flights.items() if not f.empty())))
        for k, flights in state.items()))


def _async(node) -> bool:
    """Whether ``node`` issues, commits or waits for async ops of a tracked mechanism (a
    statement that does must be walked into: a wait under an ``if`` or in a loop that may not
    run completes nothing on the other path)."""
    found = []

    def on_call(c):
        eff = effect_of(c)
        if eff is not None and (_tracked(eff.completes_on) or _tracked(eff.commits) or
                                (_tracked(eff.waits) and eff.pending_arg is not None)):
            found.append(c)

    tvm_ffi.structural_walk(node, (tvm.ir.Call, on_call))
    return bool(found)


def _fixpoint(state: dict, iterate):
    """Run ``iterate(entry) -> (result, next entry)`` from ``state`` until the entry state
    settles, widening it (every group one, whole tiles) after a few rounds so that it does;
    the last result."""
    entry = _copy(state)
    for attempt in range(6):
        result, nxt = iterate(entry)
        if attempt >= 3:
            nxt = _widened(nxt)
        if _signature(nxt) == _signature(entry):
            break
        entry = nxt
    return result


_JUMPS = {"break": tvm.ir.Op.get("tirx.break_loop"),
          "continue": tvm.ir.Op.get("tirx.continue_loop")}


def _jump(s) -> "str | None":
    """``"break"`` or ``"continue"`` when ``s`` is that statement."""
    if isinstance(s, tirx.Evaluate) and isinstance(s.value, tvm.ir.Call):
        return next((k for k, op in _JUMPS.items() if s.value.op.same_as(op)), None)
    return None


def _jumps(node) -> bool:
    """Whether ``node`` holds a ``break`` or ``continue``."""
    found = []
    tvm_ffi.structural_walk(node, (tirx.Evaluate, lambda e: found.append(e) if _jump(e) else None))
    return bool(found)


def _widened(state: dict) -> dict:
    """``state`` with every region a whole tile, in one group: waits at least as long."""
    return {k: {m: f.widened() for m, f in flights.items()} for k, flights in state.items()}


def _merged(states: list) -> dict:
    """The state after any of several paths."""
    out = states[0]
    for st in states[1:]:
        out = _merge(out, st)
    return out


class _Waits:
    def __init__(self, tiles: _Tiles, tx=None, threads: int | None = None):
        self.tiles = tiles
        # per enclosing loop walked here: the states at its breaks and continues
        self.frames: list[dict] = []
        # ``threadIdx.x`` and the values of variables bound to functions of it, per thread
        self.env: dict = {} if tx is None else {_key(tx): np.arange(threads)}
        self.everyone = b"" if tx is None else np.packbits(np.ones(threads, bool)).tobytes()
        self.threads = threads or 0

    def start(self) -> dict:
        """The state at a kernel's start: every thread, nothing in flight."""
        return {self.everyone: {}}

    def threads_taking(self, cond):
        """Which threads take ``cond``, when it depends on the thread index alone (else
        ``None``)."""
        if not self.env:
            return None
        try:
            taken = np_eval(cond, self.env)
        except NotEvaluable:
            return None
        return np.broadcast_to(np.asarray(taken, dtype=bool), (self.threads,))

    def split(self, state: dict, taken) -> tuple:
        """(the classes of ``state`` restricted to the threads that take a branch, to the
        threads that do not)."""
        sides = ({}, {})
        for k, flights in state.items():
            mask = np.unpackbits(np.frombuffer(k, np.uint8))[:self.threads].astype(bool)
            for side, part in zip(sides, (mask & taken, mask & ~taken)):
                if part.any():  # classes that overlap (a loop's entry) meet: merged
                    key = np.packbits(part).tobytes()
                    mine = {m: f.copy() for m, f in flights.items()}
                    side[key] = _merge_flights(side[key], mine) if key in side else mine
        return sides

    def bounded(self, state: dict) -> dict:
        """``state`` with at most ``_MAX_CLASSES`` classes (else one: their threads merged)."""
        if len(state) <= _MAX_CLASSES:
            return state
        keys = [np.frombuffer(k, np.uint8) for k in state]
        union = np.bitwise_or.reduce(keys).tobytes()
        flights = {}
        for v in state.values():
            flights = _merge_flights(flights, v)
        return {union: flights}

    def walked(self, node) -> bool:
        """Whether a compound statement must be walked into: it issues, commits or waits, or
        it leaves an enclosing walked loop early."""
        return _async(node) or (bool(self.frames) and _jumps(node))

    def frame(self, body, entry: dict):
        """(rewritten ``body`` of a loop, the state at the end of an iteration (continues
        included), the states at its breaks)."""
        self.frames.append({"break": [], "continue": []})
        body, end = self.stmt(body, _copy(entry))
        jumps = self.frames.pop()
        return body, _merged([end] + jumps["continue"]), jumps["break"]

    def stmt(self, s, state: dict):
        """(rewritten ``s``, the state after it)."""
        if isinstance(s, tirx.SeqStmt):
            out = []
            for x in s.seq:
                y, state = self.stmt(x, state)
                out.append(y)
            return tirx.SeqStmt(out), state
        if isinstance(s, tirx.Bind) and self.env:
            try:  # a function of the thread index (``w = tx // 128``)
                self.env[_key(s.var)] = np_eval(s.value, self.env)
            except NotEvaluable:
                self.env.pop(_key(s.var), None)
        kind = _jump(s)
        if kind is not None and self.frames:
            self.frames[-1][kind].append(_copy(state))
            return s, state
        if isinstance(s, tirx.For) and _async(s.body):
            return self.loop(s, state)
        if isinstance(s, tirx.While) and _async(s.body):
            return self.repeat(s, state)
        if isinstance(s, tirx.AttrStmt) and self.walked(s.body):
            body, end = self.stmt(s.body, state)
            return tirx.AttrStmt(s.node, s.attr_key, s.value, body), end
        if isinstance(s, tirx.IfThenElse) and self.walked(s):
            pre, state = self.wait_for(s.condition, state)
            taken = self.threads_taking(s.condition)
            yes, no = (_copy(state), _copy(state)) if taken is None else self.split(state, taken)
            then, p1 = self.stmt(s.then_case, yes)
            els, p2 = (self.stmt(s.else_case, no) if s.else_case is not None else (None, no))
            out = tirx.IfThenElse(s.condition, then, els)
            return (tirx.SeqStmt(pre + [out]) if pre else out), self.bounded(_merge(p1, p2))
        # a leaf (or a compound statement without async ops of its own): wait first if it
        # uses what is in flight, then apply its issues, commits and waits in program order
        pre, state = self.wait_for(s, state)
        return (tirx.SeqStmt(pre + [s]) if pre else s), self.apply(s, state)

    def loop(self, s, state):
        """A loop: its entry state is the state before it merged with the state at the end of
        an iteration (or at a ``continue``), seen from the next one (slot ``k`` becomes
        ``k - 1``), to a fixpoint; it ends in the state before it (no iteration), after the
        last iteration, or at a ``break`` (whole tiles: the iteration is unknown)."""
        v = s.loop_var

        def iterate(entry):
            body, end, breaks = self.frame(s.body, entry)
            back = _mapped(end, lambda r: r.shifted(v, v - 1))
            return (body, end, breaks), _merge(state, back)

        body, end, breaks = _fixpoint(state, iterate)
        last = s.min + s.extent - 1
        after = _mapped(end, lambda r: r.shifted(v, last))
        exits = [state, after] + [_widened(b) for b in breaks]
        return (tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding,
                         s.annotations, s.step), _merged(exits))

    def repeat(self, s, state):
        """A ``while`` loop, which may run any number of times: its condition is evaluated in
        the state before it merged with the state after its body (or at a ``continue``), to a
        fixpoint, and the loop ends in that state or at a ``break``."""
        def iterate(entry):
            pre, at_cond = self.wait_for(s.condition, entry)
            body, end, breaks = self.frame(s.body, at_cond)
            return (pre, body, at_cond, breaks), _merge(state, end)

        pre, body, at_cond, breaks = _fixpoint(state, iterate)
        # the condition's waits run before the first evaluation and after every iteration
        loop = tirx.While(s.condition, tirx.SeqStmt([body] + pre) if pre else body)
        return (tirx.SeqStmt(pre + [loop]) if pre else loop), _merged([at_cond] + breaks)

    def apply(self, s, state: dict) -> dict:
        """The state after the async ops, commits and waits of ``s``, in program order."""
        return {k: self.applied(s, flights) for k, flights in _copy(state).items()}

    def applied(self, s, state: dict) -> dict:
        """One class's groups in flight (``state``, updated) after ``s``."""
        def on_call(c):
            eff = effect_of(c)
            if eff is None:
                return None
            if _tracked(eff.completes_on):
                f = state.setdefault(eff.completes_on, _Flight())
                for acc in eff.accesses:
                    f.open |= self.tiles.addressed(c, acc.args)
                return tvm_ffi.WalkResult.SKIP
            if _tracked(eff.commits) and eff.commits in state:
                f = state[eff.commits]
                if f.open:
                    f.closed.append(f.open)
                    f.open = set()
            if eff.waits is not None and eff.pending_arg is not None and eff.waits in state:
                n = c.args[eff.pending_arg]
                if isinstance(n, tirx.IntImm):
                    f = state[eff.waits]
                    f.closed = f.closed[max(0, len(f.closed) - int(n.value)):] if n.value else []
            return None

        tvm_ffi.structural_walk(s, (tvm.ir.Call, on_call), order="pre")
        return state

    def wait_for(self, node, state: dict):
        """Waits for the in-flight groups holding regions ``node`` uses, in any class of
        threads (the smallest pending count any needs): (waits, new state)."""
        state = _copy(state)
        mechs = []
        for flights in state.values():
            mechs += [m for m, f in flights.items() if not f.empty() and m not in mechs]
        pre = []
        for mech in mechs:
            used = self.tiles.touched(node, mech)
            if not used:
                continue
            hits = lambda g: any(r.overlaps(u) for r in g for u in used)  # noqa: E731
            need = []
            for flights in state.values():
                f = flights.get(mech)
                if f is None:
                    continue
                if hits(f.open):
                    need.append(0)
                    continue
                newest = max((i for i, g in enumerate(f.closed) if hits(g)), default=None)
                if newest is not None:
                    need.append(len(f.closed) - 1 - newest)
            if not need:
                continue
            pending = min(need)
            for flights in state.values():
                f = flights.get(mech)
                if f is not None:
                    if pending == 0 and hits(f.open):
                        f.open = set()
                    f.closed = f.closed[max(0, len(f.closed) - pending):] if pending else []
            pre.append(_wait(mech, pending))
        return pre, state


def _kernel(k: tirx.Stmt) -> tirx.Stmt:
    """One kernel's waits; a block's shared memory goes away when it exits, so groups still in
    flight at its end (a TMA store nobody waited for, still reading its tile) are waited for
    there, inside the kernel's launch attributes."""
    tx, threads = thread_extent(k)
    walk = (_Waits(_Tiles(k)) if tx is None or not isinstance(threads, tirx.IntImm) else
            _Waits(_Tiles(k), tx, int(threads.value)))
    body, end = walk.stmt(k, walk.start())
    flying = {m for flights in end.values() for m, f in flights.items() if not f.empty()}
    waits = [_wait(m, 0) for m in sorted(flying, key=lambda m: m.value)]
    if not waits:
        return body

    def last(s):
        if isinstance(s, tirx.AttrStmt):
            return tirx.AttrStmt(s.node, s.attr_key, s.value, last(s.body))
        return tirx.SeqStmt([s] + waits)

    return last(body)


@function_pass("tl.InjectAsyncWaits")
def InjectAsyncWaits(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    return func.with_body(map_kernels(func.body, _kernel))
