"""``DeferConsumerGemm``: in a warp-specialized consumer loop with two gemms per iteration
(attention: ``S = Q K^T``, the softmax on registers, ``O = O * scale + P V``), the second gemm of
iteration ``k`` is issued in iteration ``k + 1``, right after that iteration's first gemm, so that
the softmax of ``k + 1`` runs while ``P V`` of ``k`` is on the tensor cores (FlashAttention-3's
overlap inside a warp group).

Expects: the kernel after ``InjectSoftwarePipeline`` (tile operators; the ring slots of staged
tiles explicit, their allocations annotated ``STAGED``); the consumer body of a
warp-specialized kernel marked ``CONSUMER_BODY_ATTR``.
Guarantees: a serial loop of a consumer body whose body holds exactly two ``T.gemm`` as
statements of its own sequence, ``G1`` then ``G2``, is rewritten as::

    P(lo); R(lo)                                  # iteration lo without the deferred part
    for k in [lo + 1, lo + n):  P(k); D(k - 1); R(k)
    D(lo + n - 1)

(under ``if n > 0`` unless the trip count is provably positive), where ``P`` is the body up to
and including ``G1``, ``D`` is ``G2`` with the statements between ``G1`` and ``G2`` that write
its accumulator (the rescale of ``O``), and ``R`` the other statements after ``G1``, in their
order.  The rewrite is made only when it changes no value: ``D(k)`` touches nothing that the
statements it now follows (``R(k)`` after its old place, ``P(k + 1)``) write, and writes
nothing they touch, a staged tile's ring slots counting apart where their indices provably
differ (``(base + k) % n`` against ``(base + k - 1) % n``); every tile ``D`` uses is allocated
outside the loop, and ``D`` holds no synchronization.  ``InjectAsyncWaits`` then waits for
``G1(k)`` with ``P V`` of ``k - 1`` still in flight.  CPU: unchanged.
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from ..device.effects import effect_of, synchronizes
from ..device.thread_group import CONSUMER_BODY_ATTR
from ..engine.target import is_cpu
from ..ir_utils import StmtMutator, find_all, seq, substitute
from ..ops.base import decode
from ..ops.copy import Copy
from ..ops.fill import Fill
from ..ops.gemm import Gemm
from ..ops.reduce import Reduce
from .inject_async_waits import Region, _key, _Tiles
from .passes import function_pass, kernel_name, target_of

log = logging.getLogger("tilelang")

_analyzer = Analyzer()

# The regions each tile operator reads and writes, by field.
_ROLES = {Gemm: (["A", "B", "C"], ["C"]), Copy: (["src"], ["dst"]), Fill: ([], ["dst"]),
          Reduce: (["src", "dst"], ["dst"])}


class _Accesses:
    """The regions a statement reads and writes (a staged tile's region is one ring slot when
    the statement names a single slot), from its tile operators' roles, its loads and stores
    and its device ops' declared effects; anything else it gives an address to is written."""

    def __init__(self, tiles: _Tiles):
        self.tiles = tiles

    def region(self, r: tvm.ir.TensorRegion) -> Region:
        first = r.region[0] if len(r.region) else None
        one = first is not None and _analyzer.can_prove_equal(first.extent, 1)
        return self.tiles.region(r.source, [first.min] if one else [])

    def of(self, stmt) -> tuple[set, set]:
        reads: set = set()
        writes: set = set()

        def on_call(c):
            op = decode(c)
            if op is not None:
                regions = [a for a in c.args if isinstance(a, tvm.ir.TensorRegion)]
                role = _ROLES.get(type(op))
                if role is None:  # an operator whose roles this pass does not know
                    reads.update(self.region(r) for r in regions)
                    writes.update(self.region(r) for r in regions)
                else:
                    reads.update(self.region(getattr(op, f)) for f in role[0])
                    writes.update(self.region(getattr(op, f)) for f in role[1])
                for r in regions:  # the regions' own index expressions are read
                    for rng in r.region:
                        for e in (rng.min, rng.extent):
                            tvm_ffi.structural_walk(e, walkers, order="pre")
                return tvm_ffi.WalkResult.SKIP
            eff = effect_of(c)
            if eff is not None:
                for acc in eff.accesses:
                    (writes if acc.write else reads).update(self.tiles.addressed(c, acc.args))
                if eff.releases is not None:  # handed over: another agent may overwrite it
                    writes.update(self.tiles.addressed(c, range(eff.releases, len(c.args))))
                return None
            if isinstance(c.op, tvm.ir.Op) and c.op.name == "tirx.address_of" and \
                    isinstance(c.args[0], tvm.ir.TensorLoad):
                ld = c.args[0]
                writes.add(self.tiles.region(ld.source, list(ld.indices)))
            return None

        def on_load(x):
            reads.add(self.tiles.region(x.source, list(x.indices)))

        def on_store(s):
            writes.add(self.tiles.region(s.buffer, list(s.indices)))

        walkers = [(tvm.ir.Call, on_call), (tvm.ir.TensorLoad, on_load),
                   (tirx.BufferStore, on_store)]
        tvm_ffi.structural_walk(stmt, walkers, order="pre")
        return reads, writes


def _conflict(a: tuple[set, set], b: tuple[set, set]) -> bool:
    (ra, wa), (rb, wb) = a, b
    return any(x.overlaps(y) for x in wa for y in rb | wb) or \
        any(x.overlaps(y) for x in ra for y in wb)


def _issued(stmt) -> tirx.Stmt:
    """The gemm ``stmt`` with no wait of its own (``wg_wait=-1``): ``InjectAsyncWaits`` waits
    before the first use of what it writes or reads, so the other gemm can be issued first."""
    return tirx.Evaluate(decode(stmt).replace(wg_wait=-1).to_call())


def _gemms(stmts: list) -> list[int]:
    return [i for i, s in enumerate(stmts) if isinstance(decode(s), Gemm)]


class _Defer(StmtMutator):
    def __init__(self, accesses: _Accesses, name: str):
        self.accesses, self.name = accesses, name
        self.count = 0

    def visit_For(self, s):
        if s.kind != tirx.ForKind.SERIAL or s.thread_binding is not None:
            return self.generic(s)
        stmts = list(s.body.seq) if isinstance(s.body, tirx.SeqStmt) else [s.body]
        g = _gemms(stmts)
        if len(g) != 2:
            return self.generic(s)
        g1, g2 = g
        uses = [self.accesses.of(x) for x in stmts]
        deferred = self._deferred(stmts, uses, g1, g2)
        why = self._why_not(s, stmts, uses, g1, deferred)
        if why:
            log.debug("%s: the second gemm of the loop over %s is not deferred: %s",
                      self.name, s.loop_var.name, why)
            return s
        k, lo, n = s.loop_var, s.min, s.extent
        head = stmts[:g1] + [_issued(stmts[g1])]
        rest = [x for i, x in enumerate(stmts) if i > g1 and i not in deferred]
        late = [stmts[i] for i in deferred[:-1]] + [_issued(stmts[g2])]
        first = [substitute(x, {k: lo}) for x in head + rest]
        body = head + [substitute(x, {k: k - 1}) for x in late] + rest
        loop = tirx.For(k, lo + 1, n - 1, s.kind, seq(body), s.thread_binding, s.annotations,
                        s.step, span=s.span)
        last = [substitute(x, {k: lo + n - 1}) for x in late]
        out = seq(first + [loop] + last)
        self.count += 1
        if _analyzer.can_prove(n >= 1):
            return out
        return tirx.IfThenElse(n > 0, out, None)

    @staticmethod
    def _deferred(stmts: list, uses: list, g1: int, g2: int) -> list[int]:
        """``G2`` and the statements between the gemms that write its accumulator
        (``uses[i]``: the reads and writes of ``stmts[i]``)."""
        acc = _key(decode(stmts[g2]).C.source)
        return [i for i in range(g1 + 1, g2) if any(w.tile == acc for w in uses[i][1])] + [g2]

    def _why_not(self, s, stmts: list, uses: list, g1: int, deferred: list[int]) -> str | None:
        k = s.loop_var
        if any(find_all(stmts[i], tvm.ir.Call, synchronizes) for i in deferred):
            return "it synchronizes"
        inner = {_key(a.buffer) for a in find_all(s.body, tirx.AllocBuffer)}
        for i in deferred:
            r, w = uses[i]
            if any(t.tile in inner for t in r | w):
                return "it uses a tile allocated inside the loop"
        following = [self.accesses.of(substitute(x, {k: k + 1})) for x in stmts[:g1 + 1]]
        for i in deferred:  # what each deferred statement now runs after
            passed = [uses[j] for j in range(i + 1, len(stmts)) if j not in deferred]
            if any(_conflict(uses[i], x) for x in passed + following):
                return (f"statement {i} would move past a statement that uses what it reads "
                        "or writes")
        return None


@function_pass("tl.DeferConsumerGemm")
def DeferConsumerGemm(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    name = kernel_name(func)
    accesses = _Accesses(_Tiles(func.body))

    class _Bodies(StmtMutator):
        def visit_AttrStmt(self, a):
            if a.attr_key != CONSUMER_BODY_ATTR:
                return self.generic(a)
            defer = _Defer(accesses, name)
            body = defer(a.body)
            if defer.count:
                log.debug("%s: %d consumer loop(s) issue their second gemm one iteration late",
                          name, defer.count)
            return tirx.AttrStmt(a.node, a.attr_key, a.value, body)

    return func.with_body(_Bodies()(func.body))


__all__ = ["DeferConsumerGemm"]
