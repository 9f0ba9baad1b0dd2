"""Live ranges of a kernel's shared tiles, for placing tiles with disjoint lifetimes on the
same bytes (``PlanSharedMemory``).

Program order is the kernel body's top-level statements ("units"; nested sequences are
flattened, anything else -- a loop, a conditional, a ``T.ws`` region -- is one unit).  A
tile is live from the first unit that mentions it to the last, extended as follows:

* a shared access of an asynchronous device op (``Effect.completes_on``: cp.async, TMA,
  wgmma operand reads, TMA stores) is in flight until its mechanism's wait: for a group
  mechanism, the first unit from the issuing one on whose code a full wait (no group left
  pending) follows every issue; for mbarriers, the last unit that waits on one (a pipeline
  that issues a load waits for it);  no such wait: the kernel's end;
* mbarrier objects (tiles an op of the mbarrier mechanism addresses other than as data) and
  tiles touched inside a ``T.ws`` region (producer and consumer run at the same time) are
  live for the whole kernel;
* except in a warp-specialized kernel whose consumer body (``CONSUMER_BODY_ATTR``) the
  planner gives as units of their own (``consumer``: their span): there a tile the producer
  region touches is live from the consumers' first unit (the producer may run ahead) to the
  consumers' last access of it, since the consumers wait for each of the producer's writes
  before that access (see ``CONSUMER_BODY_ATTR``); a tile only the producer touches stays
  live for the whole kernel.

A view of a tile (``T.view`` / ``T.reshape``, given as ``aliases``) is the tile's bytes: a
unit that mentions the view mentions the tile.

A loop is one unit, so a tile used in a loop is live for all of it, and so are the stage
rings of a pipelined loop (with their prologue and drain).  Tiles nothing mentions have no
range.  The analysis reads typed IR only: loads, stores, buffer variables and the declared
effects of device ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx

from ..device import sm80
from ..device.effects import Mechanism, Proxy, device_op_of, effect_of
from ..device.thread_group import group_of


def _key(x) -> int:
    return x.__chandle__()


@dataclass(frozen=True)
class LiveRange:
    """Units ``first`` to ``last`` (inclusive) of the kernel body."""

    first: int
    last: int

    def overlaps(self, other: "LiveRange") -> bool:
        return self.first <= other.last and other.first <= self.last


def kernel_units(body: tirx.Stmt) -> list[tirx.Stmt]:
    """The top-level statements of a kernel body, in program order."""
    if isinstance(body, tirx.SeqStmt):
        return [u for s in body.seq for u in kernel_units(s)]
    return [body]


def _addressed_tiles(call, positions, tiles: dict) -> list[int]:
    """Keys of the tiles that ``call``'s arguments at ``positions`` mention (``tiles``: the
    key of each buffer that stands for a tile -> the tile's key)."""
    out = []
    for i in positions:
        if i < len(call.args):
            out += _mentioned(call.args[i], tiles)
    return out


def _mentioned(node, tiles: dict) -> list[int]:
    found = []

    def on_var(v):
        if _key(v) in tiles:
            found.append(tiles[_key(v)])

    tvm_ffi.structural_walk(node, (tvm.ir.Var, on_var))
    return found


def _data_positions(call) -> set[int]:
    eff = effect_of(call)
    pos = {i for a in eff.accesses for i in a.args}
    for start in (eff.releases, eff.orders):
        if start is not None:
            pos |= set(range(start, len(call.args)))
    return pos


def _drains(call) -> bool:
    """Whether a wait leaves nothing of its mechanism in flight."""
    eff = effect_of(call)
    if eff.pending_arg is None:
        return True
    n = call.args[eff.pending_arg]
    return isinstance(n, tirx.IntImm) and int(n) == 0


@dataclass
class _Unit:
    """What one unit does to the tiles."""

    touched: set
    in_region: set  # touched inside a T.ws region
    mbarriers: set
    issued: dict  # mechanism -> tiles an async op of it accesses
    async_proxy: set  # tiles an async-proxy op accesses
    drained_after_issue: set  # mechanisms whose last event in the unit is a full wait
    drains: set  # mechanisms with a full wait in the unit
    mbarrier_wait: bool
    barrier_threads: int = 0  # the threads the unit's barrier synchronizes (0: none)


def _analyse(unit: tirx.Stmt, tiles: dict, block_threads: int) -> _Unit:
    u = _Unit(set(_mentioned(unit, tiles)), set(), set(), {}, set(), set(), set(), False)
    last_event: dict = {}  # mechanism -> "issue" | "drain" | "wait"

    def on_call(c):
        d = device_op_of(c)
        if d is None:
            return None
        eff = d.effect
        data = _data_positions(c)
        mech = {eff.completes_on, eff.commits, eff.waits} - {None}
        if Mechanism.MBARRIER in mech:
            others = [i for i in range(len(c.args)) if i not in data]
            u.mbarriers.update(_addressed_tiles(c, others, tiles))
        if eff.accesses:
            accessed = _addressed_tiles(c, sorted({i for a in eff.accesses for i in a.args}),
                                        tiles)
            if eff.proxy == Proxy.ASYNC:
                u.async_proxy.update(accessed)
            if eff.completes_on is not None and accessed:
                u.issued.setdefault(eff.completes_on, set()).update(accessed)
                last_event[eff.completes_on] = "issue"
        if eff.waits is not None:
            full = _drains(c)
            last_event[eff.waits] = "drain" if full else "wait"
            if full:
                u.drains.add(eff.waits)
            if eff.waits == Mechanism.MBARRIER:
                u.mbarrier_wait = True
        return None

    def on_attr(a):
        if group_of(a) is not None:
            u.in_region.update(_mentioned(a.body, tiles))

    tvm_ffi.structural_walk(unit, [(tvm.ir.Call, on_call), (tirx.AttrStmt, on_attr)],
                            order="pre")
    u.drained_after_issue = {m for m, e in last_event.items() if e == "drain"}
    if isinstance(unit, tirx.Evaluate) and effect_of(unit) is not None:
        eff = effect_of(unit)
        if eff.sync is not None and eff.sync.barrier_arg is not None:
            bar, count = sm80.barrier_group(unit.value)
            u.barrier_threads = block_threads if bar == 0 else min(int(count), block_threads)
    return u


class Liveness:
    """Live ranges of the shared tiles ``tiles`` (``key -> buffer``) over ``units``;
    ``aliases`` maps the key of each view of a tile to the tile's key."""

    def __init__(self, units: list, tiles: dict, block_threads: int,
                 aliases: dict | None = None, consumer: "LiveRange | None" = None):
        self.units, self.block_threads = units, block_threads
        names = {k: k for k in tiles}
        names.update({k: t for k, t in (aliases or {}).items() if t in tiles})
        self.info = [_analyse(s, names, block_threads) for s in units]
        n = len(units)
        self.ranges: dict[int, LiveRange] = {}
        mbarriers, in_region = set(), set()
        for u in self.info:
            mbarriers |= u.mbarriers
            in_region |= u.in_region
        for k in tiles:
            hits = [i for i, u in enumerate(self.info) if k in u.touched]
            if not hits:
                continue
            first = hits[0]
            if k in in_region and consumer is not None and k not in mbarriers:
                # handed by the producer region: live from the consumers' start
                hits = [i for i in hits if k not in self.info[i].in_region]
                if not any(consumer.first <= i <= consumer.last for i in hits):
                    hits = []  # the consumers never wait for it: live throughout
                first = min(hits[0], consumer.first) if hits else 0
            elif k in in_region or k in mbarriers:
                hits = []
            if not hits:
                self.ranges[k] = LiveRange(0, n - 1)
                continue
            last = hits[-1]
            for i in hits:
                for mech, issued in self.info[i].issued.items():
                    if k in issued:
                        last = max(last, self._completion(i, mech))
            self.ranges[k] = LiveRange(first, last)

    def _completion(self, i: int, mech: Mechanism) -> int:
        """The unit by which an async op of ``mech`` issued in unit ``i`` is complete."""
        n = len(self.info)
        if mech == Mechanism.MBARRIER:
            waits = [j for j in range(i, n) if self.info[j].mbarrier_wait]
            return waits[-1] if waits else n - 1
        if mech in self.info[i].drained_after_issue:
            return i
        for j in range(i + 1, n):
            if mech in self.info[j].drains and self._unconditional(self.units[j]):
                return j
        return n - 1

    @staticmethod
    def _unconditional(stmt) -> bool:
        """Whether the statement's waits run whenever it runs (no loop or condition)."""
        ok = []

        def on(s):
            ok.append(s)

        tvm_ffi.structural_walk(stmt, [(tirx.For, on), (tirx.IfThenElse, on), (tirx.While, on)])
        return not ok

    def first_access_is_async(self, key: int) -> bool:
        """Whether the tile's first unit accesses it through the async proxy (TMA, wgmma)."""
        r = self.ranges[key]
        return key in self.info[r.first].async_proxy

    def block_barrier_at(self, i: int) -> bool:
        """Whether unit ``i`` is a barrier of the whole block."""
        return self.info[i].barrier_threads >= self.block_threads

    def barrier_threads_at(self, i: int) -> int:
        """How many threads unit ``i``'s barrier synchronizes (0: it is no barrier)."""
        return self.info[i].barrier_threads
