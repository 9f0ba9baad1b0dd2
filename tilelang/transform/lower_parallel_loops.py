"""``LowerParallelLoops``: map ``T.Parallel`` nests onto threads and fragments onto registers.

Expects: layouts from ``LayoutInference`` (``tl.layout`` on fragments, ``tl.loop_layout`` on
outermost ``T.Parallel`` loops), tile operators already lowered.
Guarantees: every annotated nest becomes ``for r in T.unroll(R): <body at inverse(tx, r)>``
(innermost register digits vectorized where the lowering asked for it), guarded where the
layout pads the tile; writes to shared/global memory inside a replicated layout (stores, and
device ops whose declared effect writes such memory) are done by one replica only; every fragment becomes a per-thread ``local`` array of its register count and
every access is rewritten to its register.  Inside a ``T.ws`` region, loops are partitioned
over the region's thread group (thread rank ``tx - offset``).  Each fragment access in a loop whose indices are
functions of the loop variables is checked over every (thread, register): the element must
live in the thread that computes it, else ``LoweringError``.  A statement outside any
``T.Parallel`` loop that touches fragment elements runs on the thread that owns them.
CPU: unchanged.
"""

from __future__ import annotations

import itertools

import numpy as np

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from ..device.effects import effect_of
from ..device.thread_group import ThreadGroup, group_of
from ..engine.target import is_cpu
from ..errors import LoweringError
from ..layout import codec
from ..layout.fragment import (REG, Fragment, check_replicas_written, is_replicated,
                               owners)
from ..language.view import reshaped_layout, viewed_buffer
from ..ir_utils import StmtMutator, map_kernels, map_nodes, peel_parallel, substitute, uses_var
from .layout_inference import FRAGMENT, check_constant_extents, key
from ..utils.np_eval import NotEvaluable, np_eval
from .passes import function_pass, target_of

VECTORIZE = "tl.vectorize"
PARTITIONED = "tl.partitioned"  # marks the per-thread register loop a T.Parallel nest became


class _Kernel(StmtMutator):
    """Rewrites one kernel body; ``tx`` is its threadIdx.x."""

    def __init__(self, tx):
        self.tx = tx
        self.group: ThreadGroup | None = None  # the T.ws region being rewritten, if any
        self.frags: dict[int, tuple] = {}  # key -> (buffer, layout, local buffer)
        self.outer: list[tuple] = []  # (var, min, extent) of the constant-bound loops around
        self.reducers: set = set()  # keys of reducer copies (T.alloc_reducer): one update each

    def rank(self):
        """The thread's index in the group running the code (``tx`` for the block)."""
        return self.tx if self.group is None else self.group.rank(self.tx)

    def visit_AttrStmt(self, s):
        g = group_of(s)
        if g is None:
            return self.generic(s)
        old, self.group = self.group, g
        try:
            return self.generic(s)
        finally:
            self.group = old

    # fragments ----------------------------------------------------------------------------
    def visit_AllocBuffer(self, s):
        b = s.buffer
        if "tl.reducer" in s.annotations:
            self.reducers.add(key(b))
        if b.scope() != FRAGMENT:
            return s
        if "tl.layout" not in s.annotations:
            raise LoweringError(f"fragment {b.name} has no layout (run LayoutInference)")
        lay = codec.decode(s.annotations["tl.layout"])
        local = tirx.decl_buffer([lay.num_regs], b.dtype, b.name, scope="local")
        self.frags[key(b)] = (b, lay, local)
        return tirx.AllocBuffer(local)

    def visit_DeclBuffer(self, s):
        """A view of a fragment (``T.reshape``, or ``T.view`` keeping the element size) is
        the fragment's registers, laid out by its layout reshaped; the declaration goes, or
        with another dtype becomes one of the registers as that type."""
        base = viewed_buffer(s)
        if base is None or key(base) not in self.frags:
            return s
        _, lay, local = self.frags[key(base)]
        v = s.buffer
        decl = None
        if v.dtype != local.dtype:  # the same registers read as another type: declared
            regs = local
            local = tirx.decl_buffer(regs.shape, v.dtype, v.name, scope="local")
            decl = tirx.DeclBuffer(local, data=regs.data)
        self.frags[key(v)] = (v, reshaped_layout(lay, base, v), local)
        return decl

    # loops --------------------------------------------------------------------------------
    def visit_For(self, s):
        if s.kind != tirx.ForKind.PARALLEL or "tl.loop_layout" not in s.annotations:
            bounded = isinstance(s.min, tirx.IntImm) and isinstance(s.extent, tirx.IntImm)
            if bounded:  # a T.Parallel body may index fragments by this loop's variable
                self.outer.append((s.loop_var, int(s.min), int(s.extent)))
            try:
                return self.generic(s)
            finally:
                if bounded:
                    self.outer.pop()
        return self.partition(s, codec.decode(s.annotations["tl.loop_layout"]))

    def partition(self, loop, lay: Fragment):
        vars_, exts, body = peel_parallel(loop)
        check_constant_extents(loop, exts)
        body = self(body)  # nested statements (serial loops inside) first
        ext = [int(e) for e in exts]
        if ext != list(lay.shape):
            raise LoweringError(f"T.Parallel loop over {ext} got a layout of shape {lay.shape}")
        vec = int(loop.annotations.get(VECTORIZE, 1))
        inner = lay.dims[-1][-1] if lay.dims and lay.dims[-1] else None
        if not (vec > 1 and inner is not None and inner.kind == REG and inner.stride == 1):
            vec = 1
        while vec > 1 and (inner.extent % vec or lay.num_regs % vec):
            vec //= 2  # the widest vector the innermost run of registers holds
        if self.group is not None and lay.num_threads > self.group.count:
            raise LoweringError(
                f"a T.Parallel loop over {ext} inside T.ws ({self.group}) got a layout for "
                f"{lay.num_threads} threads; inside a thread group use T.copy / T.fill between "
                "shared and global memory, whose lowerings distribute over the group")
        r = tirx.Var("r", "int32")
        tx = self.rank()
        idx = lay.inverse(tx, r)
        vmap = {v: e for v, e in zip(vars_, idx)}
        body = self.localize(body, vars_, lay, r)
        body = substitute(body, vmap)
        guards = [e < x for e, x, p in zip(idx, ext, lay.padded_shape) if p != x]
        if lay.replicas:
            body = _guard_side_effects(body, lay.replica_index(tx) == 0, self.local_keys(),
                                       self.reducers)
        a = Analyzer()
        if vec > 1:
            ro, rv = tirx.Var("ro", "int32"), tirx.Var("rv", "int32")
            body = substitute(body, {r: ro * vec + rv})
            guards = [substitute(g, {r: ro * vec}) for g in guards]
            stmt = _guarded(guards, tirx.For(rv, tirx.const(0, "int32"), vec,
                                             tirx.ForKind.VECTORIZED, body))
            return tirx.For(ro, tirx.const(0, "int32"), lay.num_regs // vec,
                            tirx.ForKind.UNROLLED, stmt, annotations={PARTITIONED: 1})
        stmt = _guarded([a.simplify(g) for g in guards], body)
        return tirx.For(r, tirx.const(0, "int32"), lay.num_regs, tirx.ForKind.UNROLLED, stmt,
                        annotations={PARTITIONED: 1})

    def local_keys(self) -> set:
        return {key(v[2]) for v in self.frags.values()}

    def localize(self, body, loop_vars, loop_lay: Fragment, r):
        """Rewrite fragment accesses inside a loop partitioned by ``loop_lay`` (before the loop
        vars are substituted), checking each element lives in the computing thread."""
        vkeys = [key(v) for v in loop_vars]

        inner = _inner_loops(body) + self.outer

        stores = []
        tvm_ffi.structural_walk(body, (tirx.BufferStore, stores.append))
        for st in stores:  # (checked outside the walk, so that errors keep their type)
            if key(st.buffer) in self.frags and self.frags[key(st.buffer)][1].replicas:
                b, lay, _ = self.frags[key(st.buffer)]
                self.check(b, lay, list(st.indices), loop_vars, loop_lay, inner, write=True)

        def reg_of(buf, indices):
            b, lay, local = self.frags[key(buf)]
            self.check(b, lay, indices, loop_vars, loop_lay, inner)
            pos = _positions(indices, vkeys)
            reg = _matched_reg(lay, loop_lay, pos, r) if pos is not None else None
            if reg is None:
                idx = loop_lay.inverse(self.rank(), r)
                reg = Analyzer().simplify(lay.forward_reg(
                    [substitute(e, dict(zip(loop_vars, idx))) for e in indices]))
                reg = _strip_tx(reg, self.tx)
            return local, reg

        return _rewrite_fragments(body, self.frags, reg_of)

    def check(self, buf, lay, indices, loop_vars, loop_lay, inner=(), write=False):
        """Every (thread, register) of the loop, and every value of the serial loops nested in
        its body, must find the element in the computing thread; a ``write`` must also be
        made by every thread that holds a copy of the element (each updates its own)."""
        shown = ", ".join(str(e) for e in indices)
        used = [(v, lo, n) for v, lo, n in inner if any(uses_var(e, v) for e in indices)]
        combos = 1
        for _, _, n in used:
            combos *= n
        if combos > 4096:
            raise LoweringError(f"fragment {buf.name}[{shown}]: too many inner-loop values to "
                                "check its ownership; make the inner loop a T.Parallel dim")
        ok, tables = True, []
        for values in itertools.product(*[range(lo, lo + n) for _, lo, n in used]):
            fixed = {key(v): x for (v, _, _), x in zip(used, values)}

            def index_fn(idx_arrays):
                env = {key(v): a for v, a in zip(loop_vars, idx_arrays)}
                env.update(fixed)
                try:
                    return [np_eval(e, env) for e in indices]
                except NotEvaluable as what:
                    raise LoweringError(
                        f"fragment {buf.name}[{shown}] is indexed by {what} inside a "
                        "T.Parallel loop; a fragment index may only depend on the loop's own "
                        "variables and constant-bound serial loops inside it (stage the data "
                        "in shared memory for other access patterns)") from None

            got = owners(loop_lay, lay, index_fn)
            if got is not None:
                owner, mine, valid = got
                tables.append((owner, valid))
                ok = ok and bool(np.all((owner == mine) | ~valid))
            if ok and write and not check_replicas_written(loop_lay, lay, index_fn):
                raise LoweringError(
                    f"fragment {buf.name}[{shown}] is written in a T.Parallel loop whose "
                    f"layout {loop_lay} leaves some of the threads holding a copy of the "
                    f"element (fragment layout {lay}) without the new value; write it in a "
                    "loop of its own")
        outer = [v for v, _, _ in self.outer if any(uses_var(e, v) for e in indices)]
        if not ok and outer and _owner_varies(tables):
            names = ", ".join(v.name for v in outer)
            runs = [f"{_thread_span(lay, d)} along dim {d}" for d, e in enumerate(indices)
                    if any(uses_var(e, v) for v in outer)]
            raise LoweringError(
                f"fragment {buf.name}[{shown}] is read or written in a T.Parallel loop inside "
                f"a loop over {names}, and the thread holding the element changes with "
                f"{names} (fragment layout {lay}): no partition of the T.Parallel loop computes "
                f"it on its owner for every {names}; make the T.Parallel extent along that "
                f"dim a multiple of the span of the fragment's threads there ({', '.join(runs)}; "
                "then the outer loop steps over registers only), or stage the data in shared "
                "memory")
        if not ok and used and _owner_varies(tables):
            names = ", ".join(v.name for v, _, _ in used)
            raise LoweringError(
                f"fragment {buf.name}[{shown}] is read or written in a T.Parallel loop across "
                f"{names} (a serial loop inside it), but {buf.name} is a thread-distributed "
                f"fragment: those elements live in different threads (fragment layout {lay}). "
                f"For a sum or maximum over a dim use T.reduce_sum / T.reduce_max (the "
                "T.reduce_* ops combine across threads); otherwise stage the data in shared "
                "memory")
        if not ok:
            raise LoweringError(
                f"fragment {buf.name}[{shown}] is read or written in a T.Parallel loop whose "
                f"layout {loop_lay} puts that work on threads that do not hold the element "
                f"(fragment layout {lay})")


def _thread_span(lay: Fragment, dim: int) -> int:
    """How many consecutive indices of ``dim`` the layout's innermost digits span up to and
    including its outermost thread digit there (the digits above it are registers)."""
    span, out = 1, 1
    for x in reversed(lay.dims[dim]):
        span *= x.extent
        if x.kind != REG and x.extent > 1:
            out = span
    return out


def _owner_varies(tables: list) -> bool:
    """Whether some (thread, register) of a loop finds its element in different threads for
    different values of the serial loops its index uses (then no loop layout can work)."""
    first, seen = None, None
    for owner, valid in tables:
        if first is None:
            first, seen = owner.copy(), valid.copy()
            continue
        both = seen & valid
        if np.any(both & (owner != first)):
            return True
        first = np.where(seen, first, owner)
        seen |= valid
    return False


def _inner_loops(body) -> list:
    """(var, min, extent) of the constant-bound loops nested in a T.Parallel body."""
    out = []

    def on_for(f):
        if isinstance(f.min, tirx.IntImm) and isinstance(f.extent, tirx.IntImm):
            out.append((f.loop_var, int(f.min), int(f.extent)))

    tvm_ffi.structural_walk(body, (tirx.For, on_for))
    return out


def _positions(indices, vkeys):
    pos = []
    for e in indices:
        if not isinstance(e, tvm.ir.Var) or key(e) not in vkeys:
            return None
        pos.append(vkeys.index(key(e)))
    return pos


def _matched_reg(lay: Fragment, loop_lay: Fragment, pos: list, r):
    """Register of a fragment element addressed by loop vars, read off the loop's register
    digits when the fragment's dims are digit-for-digit the loop's dims ``pos``."""
    reg = tirx.const(0, "int32")
    for d, p in enumerate(pos):
        fa, la = lay.dims[d], loop_lay.dims[p]
        if [(x.extent, x.kind) for x in fa] != [(x.extent, x.kind) for x in la]:
            return None
        for x, y in zip(fa, la):
            if x.kind == REG:
                reg = reg + tirx.floormod(tirx.floordiv(r, y.stride), y.extent) * x.stride
    return Analyzer().simplify(reg)


def _strip_tx(reg, tx):
    if uses_var(reg, tx):
        raise LoweringError(f"register index {reg} of a fragment depends on the thread index; "
                            "the access pattern does not match the fragment's layout")
    return reg


def _rewrite_fragments(body, frags: dict, reg_of):
    def on_load(x):
        if key(x.source) in frags:
            local, reg = reg_of(x.source, list(x.indices))
            return tirx.BufferLoad(local, [reg])
        return x

    def on_store(s):
        if key(s.buffer) in frags:
            local, reg = reg_of(s.buffer, list(s.indices))
            return tirx.BufferStore(local, s.value, [reg])
        return s

    return map_nodes(body, [(tvm.ir.TensorLoad, on_load),
                                         (tirx.BufferStore, on_store)])


def _guarded(conds, stmt):
    conds = [c for c in conds if not (isinstance(c, tirx.IntImm) and int(c) == 1)]
    if not conds:
        return stmt
    cond = conds[0]
    for c in conds[1:]:
        cond = tirx.And(cond, c)
    return tirx.IfThenElse(cond, stmt, None)


def _guard_side_effects(body, cond, local_keys: set, reducers: set = frozenset()):
    """Only replica 0 writes memory other threads can see, and contributes to a reducer
    (whose copies are combined over the threads: a replicated iteration counts once)."""

    class _G(StmtMutator):
        def visit_BufferStore(self, s):
            if key(s.buffer) in reducers:
                return tirx.IfThenElse(cond, s, None)
            if key(s.buffer) in local_keys or s.buffer.scope() in ("local", "local.var"):
                return s
            return tirx.IfThenElse(cond, s, None)

        def visit_Evaluate(self, s):
            eff = effect_of(s)
            if eff is not None and eff.writes_visible_memory():
                return tirx.IfThenElse(cond, s, None)
            return s

    return _G()(body)


class _OwnerGuard(StmtMutator):
    """Statements outside every ``T.Parallel`` loop run on every thread, but a fragment element
    lives in particular threads.  A store (or call) that reads or writes fragment elements is
    made by the threads holding them, one of them when it writes memory other threads see.
    What cannot be made right that way is rejected: elements held by different threads in one
    statement, a fragment element assigned to a per-thread variable, a condition on one."""

    def __init__(self, frags: dict, tx):
        self.frags, self.tx, self.block_tx = frags, tx, tx

    def visit_AttrStmt(self, s):
        g = group_of(s)  # a thread-group region: its fragments are numbered by rank
        if g is None:
            return self.generic(s)
        old, self.tx = self.tx, g.rank(self.block_tx)
        try:
            return self.generic(s)
        finally:
            self.tx = old

    def visit_For(self, s):
        if PARTITIONED in s.annotations:
            return s  # already per thread
        self.scalar_reads(f"the bounds of loop {s.loop_var.name}", s.min, s.extent)
        return self.generic(s)

    def reads(self, node) -> list:
        """Fragment elements whose values ``node`` reads (not those it only takes the address
        of, as gemm does with its accumulator)."""
        out = []

        def on_call(c):
            if isinstance(c.op, tvm.ir.Op) and c.op.name == "tirx.address_of":
                return tvm_ffi.WalkResult.SKIP
            return None

        def on_load(x):
            if key(x.source) in self.frags:
                out.append((x.source, list(x.indices)))

        tvm_ffi.structural_walk(node, [(tvm.ir.Call, on_call), (tvm.ir.TensorLoad, on_load)],
                                order="pre")
        return out

    def owner_guard(self, what: str, accesses: list, writes_shared_memory: bool):
        """The condition under which the statement runs: on the threads that hold its
        fragment elements (replicated fragments, held by every thread, constrain nothing),
        one copy of them when it writes memory other threads see."""
        a = Analyzer()
        owned = [(b, i) for b, i in accesses if not is_replicated(self.frags[key(b)][1])]
        if not owned:
            lay = self.frags[key(accesses[0][0])][1]
            return [a.simplify(lay.replica_index(self.tx) == 0)] \
                if writes_shared_memory and lay.replicas else []
        (b0, i0), rest = owned[0], owned[1:]
        lay0 = self.frags[key(b0)][1]
        t0 = lay0.forward(i0)[0]
        for b, i in rest:
            lay = self.frags[key(b)][1]
            t = lay.forward(i)[0]
            same_replicas = sorted(map(repr, lay.replicas)) == sorted(map(repr, lay0.replicas))
            if not (a.can_prove_equal(t, t0) and same_replicas):
                raise LoweringError(
                    f"{what} outside T.Parallel uses fragment elements held by different "
                    f"threads ({b0.name}[{', '.join(map(str, i0))}] in thread {t0}, "
                    f"{b.name}[{', '.join(map(str, i))}] in thread {t}); copy them through a "
                    "shared buffer first")
        conds = [a.simplify(_without_replicas(self.tx, lay0) == t0)]
        if writes_shared_memory and lay0.replicas:
            conds.append(a.simplify(lay0.replica_index(self.tx) == 0))
        return conds

    def scalar_reads(self, what: str, *nodes) -> None:
        """Scalar code every thread runs (a condition, a loop bound, a per-thread variable)
        may read only fragments every thread holds whole."""
        for b, i in [x for n in nodes for x in self.reads(n)]:
            if not is_replicated(self.frags[key(b)][1]):
                raise LoweringError(
                    f"{what} outside T.Parallel reads fragment element "
                    f"{b.name}[{', '.join(map(str, i))}], which only its owner thread holds "
                    f"({b.name} has layout {self.frags[key(b)][1]}, fixed by another use; read "
                    "it into a shared buffer, or compute inside T.Parallel)")

    def visit_BufferStore(self, s):
        target_is_frag = key(s.buffer) in self.frags
        if not target_is_frag and s.buffer.scope() in ("local", "local.var"):
            self.scalar_reads(f"the store to the per-thread variable {s.buffer.name}", s)
            return s
        acc = self.reads(s.value)
        if target_is_frag:
            acc.insert(0, (s.buffer, list(s.indices)))
        if not acc:
            return s
        return _guarded(self.owner_guard(f"the store to {s.buffer.name}", acc,
                                         not target_is_frag), s)

    def visit_Evaluate(self, s):
        acc = self.reads(s.value)
        if not acc:
            return s
        return _guarded(self.owner_guard("a call", acc, True), s)

    def visit_IfThenElse(self, s):
        self.scalar_reads(f"the condition `{s.condition}`", s.condition)
        return self.generic(s)

    def visit_While(self, s):
        self.scalar_reads(f"the condition `{s.condition}`", s.condition)
        return self.generic(s)


def _without_replicas(tx, lay: Fragment):
    v = tx
    for x in lay.replicas:
        v = v - tirx.floormod(tirx.floordiv(tx, x.stride), x.extent) * x.stride
    return v


def _thread_var(body):
    found = []

    def on_attr(a):
        if a.attr_key == "thread_extent" and a.node.thread_tag == "threadIdx.x":
            found.append(a.node.var)

    tvm_ffi.structural_walk(body, (tirx.AttrStmt, on_attr))
    return found[0] if found else None


@function_pass("tl.LowerParallelLoops")
def LowerParallelLoops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    return func.with_body(map_kernels(func.body, _lower_kernel))


def _lower_kernel(kernel):
    """One T.Kernel's parallel loops and fragment accesses, over its own ``threadIdx.x``."""
    tx = _thread_var(kernel)
    if tx is None:
        return kernel
    k = _Kernel(tx)
    body = k(kernel)
    # fragment accesses outside any loop (gemm operands, constant-index reads)
    body = _OwnerGuard(k.frags, tx)(body)
    return _rewrite_fragments(
        body, k.frags,
        lambda buf, idx: (k.frags[key(buf)][2],
                          Analyzer().simplify(k.frags[key(buf)][1].forward_reg(idx))))


__all__ = ["LowerParallelLoops", "VECTORIZE"]
