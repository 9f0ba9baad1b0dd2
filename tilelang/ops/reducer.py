"""Reducers: a reduction whose contributions each thread accumulates in a copy of its own,
combined across the threads once, at the finalize.

``T.alloc_reducer(shape, dtype, op, replication="all")`` (also the default) gives every thread
of the block its own copy of the whole buffer (a per-thread ``local`` array, marked
``tl.reducer``).  ``op`` is ``sum``, ``max``, ``min`` or, for integer dtypes, ``bitand``,
``bitor``, ``bitxor``.

An *epoch* (the public "reducer v2" surface):

- ``T.reducer_init(acc, value=None)`` opens it: every copy starts from the op's identity, and
  ``value`` (evaluated here, once) is combined into the result exactly once;
- ``T.reducer_update(acc[idx], x)`` inside ``T.Parallel`` combines ``x`` into the running
  thread's copy.  Each iteration of the loop contributes once, however many threads the
  loop's layout runs it on (the copies of a replicated iteration but one contribute nothing);
- ``T.finalize_reducer(acc, dst)`` combines the copies element-wise over the threads of the
  block (or of the ``T.ws`` group it runs in) and writes the result into ``dst`` (a fragment
  or any buffer of ``acc``'s shape).

Between the init and the finalize the reducer may not be read or stored to otherwise; the
finalize lies in the init's scope (the same statement list, or conditionals in it), and every
epoch is finalized (:func:`check_epochs`, run by the pass ``CheckReducerEpochs``).  The older form ``T.clear(acc)``,
``acc[i] += x`` / ``acc[i] = T.max(acc[i], x)`` and ``T.finalize_reducer(acc)`` (the result
left in every copy) works too.  The CPU runs a block on one thread, so its single copy already
holds the result there.  ``replication="none"`` gives an ordinary fragment, each element held
by the threads its layout says; the finalize then has nothing to combine.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ..device import atomics as device
from ..errors import LoweringError
from . import loops
from . import region as R
from .base import LayoutContext, LowerContext, TileOp, decode, register

OPS = ("sum", "max", "min", "bitand", "bitor", "bitxor")
BITWISE = ("bitand", "bitor", "bitxor")
# combines whose value does not change when a contribution is repeated
IDEMPOTENT = ("max", "min", "bitand", "bitor")
_COMBINE = {"sum": "tl::SumOp", "max": "tl::MaxOp", "min": "tl::MinOp",
            "bitand": "tl::BitAndOp", "bitor": "tl::BitOrOp", "bitxor": "tl::BitXorOp"}
# the AllocBuffer annotation of a reducer's per-thread copy: its op
REDUCER = "tl.reducer"


def identity(kind: str, dtype: str):
    """The value every copy starts from: 0 for sum/bitor/bitxor, all ones for bitand,
    the lowest / highest value for max / min."""
    if kind in ("sum", "bitor", "bitxor"):
        return tirx.const(0, dtype)
    if kind == "bitand":
        return tirx.const(-1, dtype)
    is_float = tvm.DataType(dtype).is_float
    if kind == "max":
        return tirx.const(-float("inf"), dtype) if is_float else tirx.min_value(dtype)
    return tirx.const(float("inf"), dtype) if is_float else tirx.max_value(dtype)


def combine(kind: str, a, b):
    """``a`` combined with ``b`` by ``kind``."""
    if kind == "sum":
        return a + b
    if kind == "max":
        return tirx.max(a, b)
    if kind == "min":
        return tirx.min(a, b)
    if kind == "bitand":
        return tirx.bitwise_and(a, b)
    if kind == "bitor":
        return tirx.bitwise_or(a, b)
    return tirx.bitwise_xor(a, b)


@register
class ReducerInit(TileOp):
    """Open an epoch of ``reducer``: copies at the identity, ``value`` counted once."""

    name = "tl.reducer_init"
    printer = "reducer_init"
    fields = ("reducer", "kind", "value")
    writes = ("reducer",)
    defaults = {"value": None}


@register
class ReducerUpdate(TileOp):
    """Combine ``value`` into the running thread's copy of the element ``target``."""

    name = "tl.reducer_update"
    printer = "reducer_update"
    fields = ("target", "kind", "value")
    writes = ("target",)


@register
class FinalizeReducer(TileOp):
    """Combine every thread's copy of ``reducer`` with ``kind``: the result in every copy,
    and in ``dst`` when given."""

    name = "tl.finalize_reducer"
    printer = "finalize_reducer"
    fields = ("reducer", "kind", "dst")
    writes = ("dst",)
    defaults = {"dst": None}

    def propagate_layout(self, ctx: LayoutContext) -> None:
        """Every thread holds the whole result, so a destination fragment whose layout nothing
        else fixes is held whole by every thread (static register indices when it is
        written, and when it is read back)."""
        from ..layout.fragment import replicated

        if self.dst is None:
            return
        d = R.buffer_of(self.dst)
        if d.scope() == "local.fragment" and ctx.layout(d) is None:
            ctx.demand(d, replicated([int(s) for s in d.shape], ctx.num_threads),
                       f"T.finalize_reducer(..., {d.name})")


def init(reducer, kind: str, value=None):
    return ReducerInit(reducer=R.full_region(reducer), kind=kind, value=value).to_call()


def update(target, kind: str, value):
    return ReducerUpdate(target=target, kind=kind, value=value).to_call()


def finalize(reducer, kind: str, dst=None):
    """The ``tl.finalize_reducer`` call of ``reducer`` (a buffer) combining with ``kind``."""
    return FinalizeReducer(reducer=R.full_region(reducer), kind=kind,
                           dst=None if dst is None else R.region_of(dst, "T.finalize_reducer",
                                                                     "destination")).to_call()


def _start_value(op: ReducerInit, dtype: str):
    if op.value is None:
        return None
    v = op.value
    if isinstance(v, (int, float)):
        return tirx.const(v, dtype)
    return v


def _fill_copies(op: ReducerInit, value_of) -> tirx.Stmt:
    buf = R.buffer_of(op.reducer)
    return loops.loop_nest([R.as_int(s) for s in buf.shape],
                           lambda iv: tirx.BufferStore(buf, value_of(), list(iv)),
                           kind=loops.SERIAL, prefix="e")


@ReducerInit.lowering("cpu")
def _init_cpu(op: ReducerInit, ctx: LowerContext) -> tirx.Stmt:
    buf = R.buffer_of(op.reducer)
    start = _start_value(op, buf.dtype)
    ident = identity(op.kind, buf.dtype)
    return _fill_copies(op, lambda: ident if start is None else start)


@ReducerInit.lowering("cuda")
def _init_cuda(op: ReducerInit, ctx: LowerContext) -> tirx.Stmt:
    """Every copy at the identity; the starting value goes into every copy for an idempotent
    op, else into the copy of the group's first thread only (the combine counts it once)."""
    buf = R.buffer_of(op.reducer)
    start = _start_value(op, buf.dtype)
    ident = identity(op.kind, buf.dtype)
    if start is None:
        return _fill_copies(op, lambda: ident)
    if op.kind in IDEMPOTENT or buf.scope() == "local.fragment":
        return _fill_copies(op, lambda: start)
    seed = tirx.decl_buffer([1], buf.dtype, f"{buf.name}_start", scope="local")
    zero = [tirx.const(0, "int32")]
    first = ctx.thread_var == 0
    return tirx.SeqStmt([
        tirx.AllocBuffer(seed),
        tirx.BufferStore(seed, tirx.Select(first, start, ident), zero),
        _fill_copies(op, lambda: tirx.BufferLoad(seed, zero)),
    ])


def _lower_update(op: ReducerUpdate, ctx: LowerContext) -> tirx.Stmt:
    """The running thread's copy of the element takes the combined value (the parallel-loop
    lowering keeps one contribution per loop iteration)."""
    if not ctx.in_parallel:
        raise LoweringError(f"T.reducer_update({R.describe(op.target)}, ...) is outside any "
                            "T.Parallel loop: the contribution of a statement every thread "
                            "runs is ambiguous; put it in a T.Parallel loop")
    buf = R.buffer_of(op.target)
    idx = R.mins(op.target)
    value = loops.cast(op.value, buf.dtype)
    return tirx.BufferStore(buf, combine(op.kind, tirx.BufferLoad(buf, idx), value), idx)


ReducerUpdate.lowering("cpu")(_lower_update)
ReducerUpdate.lowering("cuda")(_lower_update)


def _publish(op: FinalizeReducer, ctx: LowerContext, parallel: bool) -> tirx.Stmt | None:
    """``dst = reducer`` element-wise (every copy holds the result)."""
    if op.dst is None:
        return None
    src, dst = R.buffer_of(op.reducer), R.buffer_of(op.dst)
    shape = [R.as_int(s) for s in src.shape]

    def body(iv):
        di = [m + v for m, v in zip(R.mins(op.dst), iv)] if len(iv) == len(op.dst.region) \
            else iv
        return tirx.BufferStore(dst, loops.cast(tirx.BufferLoad(src, list(iv)), dst.dtype), di)

    if not parallel or dst.scope() != "local.fragment":
        nest = loops.loop_nest(shape, body, kind=loops.SERIAL, prefix="e")
        if dst.scope() in ("local", "local.var") or not parallel:
            return nest
        return tirx.IfThenElse(ctx.thread_var == 0, nest, None)
    nest = loops.loop_nest(shape, body, kind=loops.PARALLEL, prefix="e")
    return loops.with_layout(nest, ctx.layout(dst))


@FinalizeReducer.lowering("cpu")
def _finalize_cpu(op: FinalizeReducer, ctx: LowerContext) -> tirx.Stmt:
    """One thread per block: its copy already holds every contribution."""
    out = _publish(op, ctx, parallel=False)
    return out if out is not None else tirx.Evaluate(tirx.const(0, "int32"))


@FinalizeReducer.lowering("cuda")
def _finalize_cuda(op: FinalizeReducer, ctx: LowerContext) -> tirx.Stmt:
    """Lanes combine by shuffles, warps through a shared scratch of one partial array per
    warp (``tl::all_reduce_array``); every thread of the group must reach it."""
    buf = R.buffer_of(op.reducer)
    publish = _publish(op, ctx, parallel=True)
    if buf.scope() == "local.fragment":  # replication="none": one holder (or equal replicas)
        return publish if publish is not None else tirx.Evaluate(tirx.const(0, "int32"))
    n = 1
    for s in buf.shape:
        if R.as_int(s) is None:
            raise LoweringError(f"T.finalize_reducer: reducer {buf.name} needs a constant shape "
                                f"on CUDA, got {R.fmt_shape(buf.shape)}")
        n *= R.as_int(s)
    threads = ctx.num_threads
    if not (threads % 32 == 0 or (threads <= 32 and threads & (threads - 1) == 0)):
        raise LoweringError(f"T.finalize_reducer: combining over {threads} threads needs whole "
                            "warps or a power of two up to 32")
    zero = [tirx.const(0, "int32")] * len(buf.shape)
    vals = tirx.address_of(tirx.BufferLoad(buf, zero))
    stmts = []
    scratch_ptr = vals  # unused below a warp
    if threads > 32:
        scratch = tirx.decl_buffer([threads // 32 * n], buf.dtype, f"{buf.name}_red",
                                   scope="shared.dyn")
        stmts.append(tirx.AllocBuffer(scratch))
        scratch_ptr = tirx.address_of(tirx.BufferLoad(scratch, [tirx.const(0, "int32")]))
    offset, barrier = 0, 0
    if ctx.barriers is not None and ctx.group != ctx.barriers.block:
        offset, barrier = ctx.group.offset, ctx.barriers.of(ctx.group)
    targs = f"{_COMBINE[op.kind]}, {n}, {threads}, {offset}, {barrier}"
    stmts.append(tirx.Evaluate(device.all_reduce_array(targs, vals, scratch_ptr)))
    if publish is not None:
        stmts.append(publish)
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


# epochs --------------------------------------------------------------------------------------
_REDUCER_OPS = (ReducerInit, ReducerUpdate, FinalizeReducer)


def _reducer_of(op) -> Any:
    return R.buffer_of(op.target if isinstance(op, ReducerUpdate) else op.reducer)


def check_epochs(body: tirx.Stmt) -> None:
    """Raise ``LoweringError`` unless every ``T.reducer_init`` epoch is well formed: updates
    after the init and inside ``T.Parallel``, one init per epoch, a finalize in the init's
    scope (the same statement list, or conditionals in it), and no other access to the
    reducer."""
    # reducers with a T.reducer_init (handle -> buffer): accesses checked
    keys = {R.buffer_of(op.reducer).__chandle__(): R.buffer_of(op.reducer)
            for op in find_ops(body, ReducerInit)}
    updates = find_ops(body, ReducerUpdate)
    if not keys and not updates:
        return
    state: dict = {}  # handle -> path of the open epoch's init

    def name(b):
        return b.name

    def reads(expr, where: str) -> None:
        found = []
        tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, lambda x: found.append(x)))
        for x in found:
            if x.source.__chandle__() in keys:
                raise LoweringError(f"illegal read of reducer {name(x.source)} ({where}): a "
                                    "reducer's partial values are read through the destination "
                                    "of T.finalize_reducer(acc, dst)")

    def visit(s, path: tuple) -> None:
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                visit(x, path)
        elif isinstance(s, tirx.For):
            reads(s.min, "a loop bound")
            reads(s.extent, "a loop bound")
            kind = "parallel" if s.kind == tirx.ForKind.PARALLEL else "loop"
            visit(s.body, path + ((kind, s.loop_var.__chandle__()),))
        elif isinstance(s, tirx.While):
            reads(s.condition, "a condition")
            visit(s.body, path + (("loop", s.__chandle__()),))
        elif isinstance(s, tirx.IfThenElse):
            reads(s.condition, "a condition")
            visit(s.then_case, path + (("if", s.then_case.__chandle__()),))
            if s.else_case is not None:
                visit(s.else_case, path + (("if", s.else_case.__chandle__()),))
        elif isinstance(s, tirx.Bind):  # TVM 0.27's LetStmt: a flat binding, no body
            reads(s.value, "a binding")
        elif isinstance(s, tirx.AttrStmt):
            visit(s.body, path)
        elif isinstance(s, tirx.BufferStore):
            if s.buffer.__chandle__() in keys:
                raise LoweringError(f"illegal store to reducer {name(s.buffer)}: between "
                                    "T.reducer_init and T.finalize_reducer a reducer is updated "
                                    "with T.reducer_update(acc[...], value) only")
            reads(s.value, "a stored value")
            for i in s.indices:
                reads(i, "an index")
        elif isinstance(s, tirx.Evaluate):
            op = decode(s)
            if isinstance(op, _REDUCER_OPS):
                epoch_op(op, path)
            elif op is not None:
                for v in vars(op).values():
                    if R.is_region(v) and R.buffer_of(v).__chandle__() in keys:
                        raise LoweringError(
                            f"illegal use of reducer {name(R.buffer_of(v))} by "
                            f"T.{op.printer}: a reducer opened by T.reducer_init is written "
                            "by T.reducer_update only")
            else:
                reads(s.value, "an expression")
        elif isinstance(s, tirx.Bind):
            reads(s.value, "a binding")

    def epoch_op(op, path) -> None:
        b = _reducer_of(op)
        h = b.__chandle__()
        if h not in keys:
            if isinstance(op, ReducerUpdate):
                raise LoweringError(f"T.reducer_update of reducer {b.name} before "
                                    "T.reducer_init: open the epoch with T.reducer_init(acc)")
            return
        if isinstance(op, ReducerInit):
            if h in state:
                raise LoweringError(f"double T.reducer_init of reducer {b.name}: the epoch "
                                    "it opened is not finalized yet")
            state[h] = path
        elif isinstance(op, ReducerUpdate):
            if h not in state:
                raise LoweringError(f"T.reducer_update of reducer {b.name} before "
                                    "T.reducer_init (or after its T.finalize_reducer)")
            reads(op.value, "the value of T.reducer_update")
        else:
            if h not in state:
                raise LoweringError(f"T.finalize_reducer of reducer {b.name} before "
                                    "T.reducer_init")
            start = state[h]
            extra = path[len(start):]
            if path[:len(start)] != start or any(k != "if" for k, _ in extra):
                raise LoweringError(
                    f"T.finalize_reducer of reducer {b.name} is not in the scope of its "
                    "T.reducer_init: it must run once per init, in the same statement list "
                    "or a conditional inside it (not in a loop the init is not in)")
            del state[h]

    visit(body, ())
    if state:
        b = keys[next(iter(state))]
        raise LoweringError(f"reducer {b.name} is never finalized: its T.reducer_init epoch "
                            "needs a T.finalize_reducer(acc, dst)")


def check_accumulations(body: tirx.Stmt) -> None:
    """Raise ``LoweringError`` where the older reducer form (no ``T.reducer_init``) of a sum or
    bitxor reducer would count a contribution once per thread on CUDA: a store to it outside
    any ``T.Parallel`` loop (every thread runs it), a ``T.copy`` into it (every copy holds the
    values), or an update after ``T.finalize_reducer`` without a ``T.clear`` first (every copy
    holds the combined result).  Max, min, bitand and bitor do not change when a contribution
    is repeated."""
    from ..errors import source_location
    from .copy import Copy
    from .fill import Fill

    counted: dict = {}  # handle -> buffer of the sum/bitxor reducers without T.reducer_init

    def on_alloc(a):
        if a.annotations.get(REDUCER) in ("sum", "bitxor"):
            counted[a.buffer.__chandle__()] = a.buffer

    tvm_ffi.structural_walk(body, (tirx.AllocBuffer, on_alloc))
    for init in find_ops(body, ReducerInit):
        counted.pop(R.buffer_of(init.reducer).__chandle__(), None)
    if not counted:
        return

    def fail(why: str, span) -> None:
        where = source_location(span)
        raise LoweringError(why + (f"\n  {where}" if where else ""))

    def visit(s, final: set, parallel: bool) -> set:
        """The reducers holding a combined result after ``s``, from ``final`` before it."""
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                final = visit(x, final, parallel)
            return final
        if isinstance(s, tirx.For):
            inner = parallel or s.kind == tirx.ForKind.PARALLEL
            once = visit(s.body, set(final), inner)
            return visit(s.body, final | once, inner)  # the next iteration starts from it
        if isinstance(s, tirx.IfThenElse):
            out = visit(s.then_case, set(final), parallel)
            return out | (visit(s.else_case, set(final), parallel)
                          if s.else_case is not None else final)
        if isinstance(s, tirx.AttrStmt):
            return visit(s.body, final, parallel)
        if isinstance(s, tirx.BufferStore) and s.buffer.__chandle__() in counted:
            b = s.buffer
            if not parallel:
                fail(f"store to reducer {b.name} outside any T.Parallel loop: every thread "
                     "runs it and T.finalize_reducer would count it once per thread; put it "
                     "in a T.Parallel loop", s.span)
            if b.__chandle__() in final:
                fail(f"reducer {b.name} is updated after T.finalize_reducer, which left the "
                     "combined result in every thread's copy: the next finalize would count "
                     "it once per thread; T.clear it first, or use T.reducer_init epochs",
                     s.span)
            return final
        if isinstance(s, tirx.Evaluate):
            op = decode(s)
            if isinstance(op, (Copy, Fill)) and R.is_region(op.dst) and \
                    R.buffer_of(op.dst).__chandle__() in counted:
                h = R.buffer_of(op.dst).__chandle__()
                if isinstance(op, Copy):
                    fail(f"T.copy into reducer {counted[h].name}: every thread's copy would "
                         "hold the values and T.finalize_reducer would count them once per "
                         "thread; start it with T.clear or T.reducer_init(acc, value)",
                         op.span)
                return final - {h}
            if isinstance(op, FinalizeReducer):
                return final | {R.buffer_of(op.reducer).__chandle__()}
        return final

    visit(body, set(), False)


def find_ops(body: tirx.Stmt, cls) -> list:
    """The tile ops of class ``cls`` in ``body``, in program order."""
    found: list = []

    def on_eval(s):
        op = decode(s)
        if isinstance(op, cls):
            found.append(op)

    tvm_ffi.structural_walk(body, (tirx.Evaluate, on_eval))
    return found

