"""``CheckBounds``: on the CPU backend every buffer access is checked against the buffer's shape.

The CPU backend is the reference semantics, so an index past a tensor, shared tile or fragment
must not corrupt memory there: it raises :class:`tilelang.errors.OutOfBoundsError` from the
kernel call, naming the buffer, the index values, the shape and the user's source line.

``MarkSourceLines`` (before ``LowerTileOps``) wraps every tile operator in a ``tl.source_line``
attribute holding its source line, so the accesses its lowering creates can name it.
``CheckBounds`` (after ``LowerKernelLaunch``) then reasons over every ``BufferLoad`` and
``BufferStore``: an access the analyzer proves in range under its loop ranges and enclosing
conditions (``if`` statements, ``T.if_then_else`` guards such as the zero fill of a copy at a
tensor's edge) is left alone; any other access is guarded, so it never touches memory out of
range (a load yields 0, a store is skipped), and a failure is recorded.  The grid loop is split
into ``CHUNKS`` parallel chunks of consecutive blocks, each with its own record of its first
failure, so that after the grid the lowest failing block's first failure is reported (through
the packed function ``tilelang.out_of_bounds``, which raises).  TVM ignores errors raised inside
a parallel loop, hence the record.  The pass config ``tl.disable_bounds_check`` turns the
access checks off; an integer division by zero, which would kill the process, is still guarded.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer
from tvm.tirx.buffer import is_buffer_var

from ..engine.target import is_cpu
from ..errors import DivisionByZeroError, OutOfBoundsError, source_location
from ..ops.base import decode
from ..ops.loops import dtype_of
from . import pass_config
from ..ir_utils import seq
from .passes import function_pass, target_of

SOURCE_LINE = "tl.source_line"
CALLBACK = "tilelang.out_of_bounds"
LOAD = tvm.ir.TensorLoad  # what ``tirx.BufferLoad(...)`` builds
CHUNKS = 64  # parallel chunks of the grid, each recording its own first failure

tvm_ffi.register_error("tilelang.OutOfBoundsError", OutOfBoundsError)
tvm_ffi.register_error("tilelang.DivisionByZeroError", DivisionByZeroError)
DIVISION = "tilelang.division_by_zero"


@tvm_ffi.register_global_func(DIVISION)
def _report_division(kernel: str, where: str) -> None:
    """Raise the error of an integer division by zero (called by the kernel after its grid)."""
    raise DivisionByZeroError(f"{kernel}: integer division or remainder by zero"
                              + (f"\n  {where}" if where else ""))


@tvm_ffi.register_global_func(CALLBACK)
def _report(kernel: str, buffer: str, access: str, where: str, ndim: int, *rest: Any) -> None:
    """Raise the error of a failed check (called by the kernel after its grid)."""
    index = ", ".join(str(i) for i in rest[:ndim])
    dims = [str(d) for d in rest[ndim:]]
    shape = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    msg = f"{kernel}: out-of-bounds {access} {buffer}[{index}]; {buffer} has shape {shape}"
    raise OutOfBoundsError(msg + (f"\n  {where}" if where else ""))


# --- MarkSourceLines ----------------------------------------------------------------------
def _mark(stmt):
    if isinstance(stmt, tirx.Evaluate) and decode(stmt) is not None:
        where = source_location(stmt.span) or source_location(getattr(stmt.value, "span", None))
        if where:
            return tirx.AttrStmt(tvm.ir.StringImm(where), SOURCE_LINE, tirx.const(0, "int32"),
                                 stmt)
    return stmt


@function_pass("tl.MarkSourceLines")
def MarkSourceLines(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """CPU: wrap each tile operator in a ``tl.source_line`` attribute with its source line."""
    if not is_cpu(target_of(func)):
        return func
    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.Evaluate, _mark)))


# --- CheckBounds --------------------------------------------------------------------------
@dataclass
class _Site:
    """One checked access (or integer division): what the error message says about it."""

    buffer: Any  # None for a division
    access: str  # "read", "write" or "division"
    where: str
    ndim: int


_DIVISIONS = (tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod)
_BINARY = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod,
           tirx.Min, tirx.Max, tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.And,
           tirx.Or)


class _Checker:
    """Guards the accesses of one function and records failures into ``err``."""

    def __init__(self, func: tirx.PrimFunc):
        self.az = Analyzer()
        # divisions by zero are checked always
        self.check_accesses = not pass_config.get(
            pass_config.PassConfigKey.TL_DISABLE_BOUNDS_CHECK, False)
        self.sites: list[_Site] = []
        self.where: list[str] = [""]
        self.marked = 0  # depth of tile-operator source marks around the current statement
        self.slot = tirx.const(0, "int64")  # err offset of the running chunk
        self.err = None  # created when the first unproven access is found
        ranks = [1]

        def rank(access):
            ranks.append(len(access.indices))

        tvm_ffi.structural_walk(func.body, [(LOAD, rank), (tirx.BufferStore, rank)])
        self.width = 1 + max(ranks)  # a failure record: site number, then the indices
        # the grid loop of each kernel (a function may launch several, one after the other)
        self.grids = {g.loop_var.__chandle__() for g in _grid_loops(func.body)}
        self.chunk = None
        self.grid_extents: list = []  # inside a grid loop: the factors of its extent
        self.pending: list = []  # (context, in-bounds condition, site, indices) of a statement

    # statements ------------------------------------------------------------------------
    def stmt(self, s):
        """``s`` with its accesses checked.  A statement names its own source line, except
        inside a tile operator, whose statements name the operator's line."""
        own = None
        if not self.marked and getattr(s, "span", None) is not None:
            own = source_location(s.span)
        if own:
            self.where.append(own)
        try:
            return self._stmt(s)
        finally:
            if own:
                self.where.pop()

    def _stmt(self, s):
        if isinstance(s, tirx.SeqStmt):
            return seq(self.stmt(x) for x in s.seq)
        if isinstance(s, tirx.AttrStmt):
            if s.attr_key == SOURCE_LINE:
                self.where.append(str(getattr(s.node, "value", s.node)))
                self.marked += 1
                try:
                    return self.stmt(s.body)
                finally:
                    self.marked -= 1
                    self.where.pop()
            return tirx.AttrStmt(s.node, s.attr_key, s.value, self.stmt(s.body), span=s.span)
        if isinstance(s, tirx.For):
            lo, ext = self.expr(s.min), self.expr(s.extent)
            pre = self.take()
            self.az.bind(s.loop_var, tvm.ir.Range.from_min_extent(lo, ext), allow_override=True)
            if s.loop_var.__chandle__() in self.grids:
                self.chunk = tirx.Var("chunk", "int64")
                self.slot = self.chunk * self.width
                # the body runs only when the grid has blocks: every extent of it is >= 1
                self.grid_extents = _factors(ext)
            body = self.stmt(s.body)
            if s.loop_var.__chandle__() in self.grids:
                chunk, self.chunk, self.slot = self.chunk, None, tirx.const(0, "int64")
                self.grid_extents = []
                if self.err is not None:
                    return seq([pre, self._chunked(s, lo, ext, body, chunk)])
            return seq([pre, tirx.For(s.loop_var, lo, ext, s.kind, body, s.thread_binding,
                                      s.annotations, s.step, span=s.span)])
        if isinstance(s, tirx.IfThenElse):
            cond = self.expr(s.condition)
            pre = self.take()
            with self.az.constraint_scope(cond):
                then = self.stmt(s.then_case)
            els = None
            if s.else_case is not None:
                with self.az.constraint_scope(tirx.Not(cond)):
                    els = self.stmt(s.else_case)
            return seq([pre, tirx.IfThenElse(cond, then, els, span=s.span)])
        if isinstance(s, tirx.While):
            cond = self.expr(s.condition)
            pre = self.take()
            body = self.stmt(s.body)
            self.expr(s.condition)
            return seq([pre, tirx.While(cond, seq([body, self.take()]), span=s.span)])
        if isinstance(s, tirx.BufferStore):
            value = self.expr(s.value)
            indices = [self.expr(i) for i in s.indices]
            ok = self.access(s.buffer, indices, "write", ())
            store = tirx.BufferStore(s.buffer, value, indices, span=s.span)
            pre = self.take()
            return seq([pre, store if ok is None else tirx.IfThenElse(ok, store, None)])
        if isinstance(s, (tirx.LetStmt, tirx.Bind)):
            value = self.expr(s.value)
            pre = self.take()
            self.az.bind(s.var, value, allow_override=True)
            return seq([pre, type(s)(s.var, value, span=s.span)])
        if isinstance(s, tirx.Evaluate):
            value = self.expr(s.value)
            return seq([self.take(), tirx.Evaluate(value, span=s.span)])
        if isinstance(s, tirx.AssertStmt):
            cond = self.expr(s.condition)
            # TVM 0.27's constructor takes the condition first (its Python wrapper's
            # parameter names say otherwise)
            return seq([self.take(), tirx.AssertStmt(cond, s.error_kind, s.message_parts,
                                                     span=s.span)])
        return s

    def _chunked(self, s, lo, ext, body, chunk):
        """The grid loop ``for b in range(total)`` as ``CHUNKS`` chunks of consecutive blocks
        (the chunk indexes the failure record)."""
        dt = dtype_of(s.loop_var)
        total = tirx.Cast("int64", ext)
        first = tirx.Cast(dt, tirx.floordiv(chunk * total, CHUNKS))
        end = tirx.Cast(dt, tirx.floordiv((chunk + 1) * total, CHUNKS))
        inner = tirx.For(s.loop_var, lo + first, end - first, tirx.ForKind.SERIAL, body)
        return tirx.For(chunk, tirx.const(0, "int64"), tirx.const(CHUNKS, "int64"), s.kind,
                        inner, annotations=s.annotations)

    # expressions -----------------------------------------------------------------------
    def expr(self, e, ctx: tuple = ()):
        """``e`` with every unproven load guarded (0 when out of range); the checks go to
        ``self.pending`` in evaluation order.  ``ctx`` holds the enclosing ``if_then_else``
        conditions, the left operands that an ``and`` / ``or`` right operand is evaluated
        under (``"lazy"``: they decide whether a failure there counts, but prove nothing, since
        LLVM evaluates both operands) and ``Let`` bindings."""
        if isinstance(e, LOAD):
            if not is_buffer_var(e.source):
                return e
            indices = [self.expr(i, ctx) for i in e.indices]
            load = tirx.BufferLoad(e.source, indices, span=e.span)
            ok = self.access(e.source, indices, "read", ctx)
            if ok is None:
                return load
            return tirx.if_then_else(ok, load, tirx.const(0, dtype_of(load)))
        if isinstance(e, tvm.ir.Call):
            name = e.op.name if isinstance(e.op, tvm.ir.Op) else ""
            if name == "tirx.address_of":
                return e  # a pointer, not an access
            if name == "prim.if_then_else":
                c = self.expr(e.args[0], ctx)
                t = self.expr(e.args[1], ctx + (("cond", c),))
                f = self.expr(e.args[2], ctx + (("cond", tirx.Not(c)),))
                return tirx.if_then_else(c, t, f)
            args = [self.expr(a, ctx) if isinstance(a, tvm.ir.Expr) else a for a in e.args]
            if all(a.same_as(b) for a, b in zip(args, e.args)):
                return e
            return tvm.ir.Call(e.op, args, ret_ty=e.ty)
        if isinstance(e, tirx.Let):
            value = self.expr(e.value, ctx)
            body = self.expr(e.body, ctx + (("let", e.var, value),))
            return tirx.Let(e.var, value, body)
        if isinstance(e, _DIVISIONS) and _is_scalar(e) and dtype_of(e).startswith(("int", "uint")):
            return self.division(e, ctx)
        if isinstance(e, (tirx.And, tirx.Or)):
            # the right operand matters only when the left does not decide: a failure there is
            # recorded only then; LLVM evaluates both, so its guards stay ("lazy": not a fact)
            a = self.expr(e.a, ctx)
            b = self.expr(e.b, ctx + (("lazy", a if isinstance(e, tirx.And) else tirx.Not(a)),))
            return e if a.same_as(e.a) and b.same_as(e.b) else type(e)(a, b)
        if isinstance(e, _BINARY):
            a, b = self.expr(e.a, ctx), self.expr(e.b, ctx)
            return e if a.same_as(e.a) and b.same_as(e.b) else type(e)(a, b)
        if isinstance(e, tirx.Not):
            a = self.expr(e.a, ctx)
            return e if a.same_as(e.a) else tirx.Not(a)
        if isinstance(e, tirx.Cast):
            v = self.expr(e.value, ctx)
            return e if v.same_as(e.value) else tirx.Cast(e.ty, v)
        if isinstance(e, tirx.Select):  # both values are evaluated; one of them is kept
            c = self.expr(e.condition, ctx)
            t = self.expr(e.true_value, ctx + (("lazy", c),))
            f = self.expr(e.false_value, ctx + (("lazy", tirx.Not(c)),))
            return tirx.Select(c, t, f)
        if isinstance(e, tirx.Ramp):
            return tirx.Ramp(self.expr(e.base, ctx), self.expr(e.stride, ctx), e.lanes)
        if isinstance(e, tirx.Broadcast):
            return tirx.Broadcast(self.expr(e.value, ctx), e.lanes)
        if isinstance(e, (tvm.ir.Var, tirx.IntImm, tirx.FloatImm, tvm.ir.StringImm)):
            return e
        # Any other node: its loads are checked under the context reached so far.
        return tvm_ffi.structural_map(
            e, (LOAD, lambda x: self._guard_load(x, ctx)))

    def division(self, e, ctx):
        """An integer ``a / b`` or ``a % b`` whose divisor may be 0 (a failure is recorded, the
        quotient is 0) or, signed, -1 (``INT_MIN / -1`` traps on x86: the quotient is ``-a``,
        wrapping, the remainder 0), computed without trapping."""
        a, b = self.expr(e.a, ctx), self.expr(e.b, ctx)
        ty = dtype_of(e)
        zero = tirx.const(0, ty)
        # the block index math of the grid divides by its extents, which are >= 1 there
        of_grid = bool(self.grid_extents) and all(
            any(tvm_ffi.structural_equal(f, g) for g in self.grid_extents) for f in _factors(b))
        nonzero = of_grid or self._provable(tirx.NE(b, zero), ctx)
        signed = ty.startswith("int")
        not_minus_one = of_grid or not signed or \
            self._provable(tirx.NE(b, tirx.const(-1, ty)), ctx)
        if nonzero and not_minus_one:
            return e if a.same_as(e.a) and b.same_as(e.b) else type(e)(a, b)
        risky = []
        if not nonzero:
            self.pending.append((ctx, tirx.NE(b, zero), _Site(None, "division",
                                                                self.where[-1], 0), []))
            risky.append(tirx.EQ(b, zero))
        if not not_minus_one:
            risky.append(tirx.EQ(b, tirx.const(-1, ty)))
        # the divisor made 1 where it is 0 or -1, by arithmetic (a Select there is hoisted by
        # TVM's simplifier, which then folds a division by a constant 0 under the branch)
        safe = b
        for cond, lift in zip(risky, (1, 2) if not nonzero else (2,)):
            safe = safe + tirx.Cast(ty, cond) * tirx.const(lift, ty)
        out = type(e)(a, safe)
        if not not_minus_one:
            quotient = isinstance(e, (tirx.Div, tirx.FloorDiv))
            out = tirx.Select(tirx.EQ(b, tirx.const(-1, ty)), (zero - a) if quotient else zero,
                              out)
        if not nonzero:
            out = tirx.Select(tirx.EQ(b, zero), zero, out)
        return out

    def _guard_load(self, e, ctx):
        if not is_buffer_var(e.source):
            return e
        ok = self.access(e.source, list(e.indices), "read", ctx)
        return e if ok is None else tirx.if_then_else(ok, e, tirx.const(0, dtype_of(e)))

    # one access ------------------------------------------------------------------------
    def access(self, buf, indices: list, access: str, ctx: tuple):
        """The in-bounds condition of ``buf[indices]`` left to check at run time (``None``
        when proven); an unproven access also joins ``self.pending``."""
        ok = self._unproven(buf, indices, ctx) if self.check_accesses else None
        if ok is None:
            return None
        site = _Site(buf, access, self.where[-1], len(indices))
        self.pending.append((ctx, ok, site, [_extremes(i)[0] for i in indices]))
        return ok

    def _unproven(self, buf, indices: list, ctx: tuple):
        """The conjunction of the bounds of ``buf[indices]`` not proven under ``ctx``, or
        ``None`` when all are."""
        conds = []
        for idx, dim in zip(indices, buf.shape):
            for i in _extremes(idx):
                conds += [tirx.const(0, dtype_of(i)) <= i, i < dim]
        conds = [c for c in conds if not self._provable(c, ctx)]
        if not conds:
            return None
        ok = conds[0]
        for c in conds[1:]:
            ok = tirx.And(ok, c)
        return ok

    def _provable(self, cond, ctx: tuple) -> bool:
        """Whether ``cond`` holds under ``ctx``.  A guard ``a != b`` (which the analyzer
        cannot use as a bound) is split into the cases ``a < b`` and ``a > b``."""
        cases = [[]]
        for entry in ctx:
            if entry[0] == "lazy":
                continue  # not evaluated first: no fact
            if entry[0] == "cond" and _not_equal(entry[1]) is not None and len(cases) < 4:
                a, b = _not_equal(entry[1])
                cases = [c + [("cond", alt)] for c in cases for alt in (a < b, a > b)]
            else:
                cases = [c + [entry] for c in cases]
        for case in cases:
            with contextlib.ExitStack() as stack:
                feasible = True
                for entry in case:
                    if entry[0] == "let":
                        self.az.bind(entry[1], entry[2], allow_override=True)
                    elif self.az.can_prove(tirx.Not(entry[1])):
                        feasible = False  # this case cannot happen
                        break
                    else:
                        stack.enter_context(self.az.constraint_scope(entry[1]))
                if feasible and not self.az.can_prove(cond):
                    return False
        return True

    def take(self):
        """The statement recording the first failing check of ``self.pending`` (in evaluation
        order), or ``None``; clears the list."""
        pending, self.pending = self.pending, []
        out = None
        for ctx, ok, site, indices in reversed(pending):
            failed = tirx.Not(ok)
            for entry in reversed(ctx):
                failed = tirx.And(entry[1], failed) if entry[0] in ("cond", "lazy") else \
                    tirx.Let(entry[1], entry[2], failed)
            out = tirx.IfThenElse(failed, self._record(site, indices), out)
        return out

    def _record(self, site: _Site, indices: list):
        if self.err is None:
            self.err = tirx.decl_buffer((CHUNKS * self.width,), "int64", "bounds_err")
        self.sites.append(site)
        writes = [tirx.BufferStore(self.err, tirx.const(len(self.sites), "int64"), [self.slot])]
        for d, i in enumerate(indices):
            writes.append(tirx.BufferStore(self.err, tirx.Cast("int64", i), [self.slot + 1 + d]))
        first = tirx.BufferLoad(self.err, [self.slot]) == tirx.const(0, "int64")
        return tirx.IfThenElse(first, seq(writes), None)


def _factors(e) -> list:
    """The factors of a product ``a * b * ...`` (``e`` itself otherwise)."""
    if isinstance(e, tirx.Mul):
        return _factors(e.a) + _factors(e.b)
    if isinstance(e, tirx.Cast):
        return _factors(e.value)
    return [e]


def _not_equal(cond):
    """``(a, b)`` for an integer condition ``a != b`` (or ``not a == b``), else ``None``."""
    if isinstance(cond, tirx.Not) and isinstance(cond.a, tirx.EQ):
        cond = tirx.NE(cond.a.a, cond.a.b)
    if isinstance(cond, tirx.NE) and dtype_of(cond.a).startswith(("int", "uint")):
        return cond.a, cond.b
    return None


def _extremes(idx) -> list:
    """The scalar indices to check for ``idx``: a vector index's first and last lanes."""
    if isinstance(idx, tirx.Ramp) and isinstance(idx.lanes, (int, tirx.IntImm)):
        return [idx.base, idx.base + idx.stride * (int(idx.lanes) - 1)]
    if isinstance(idx, tirx.Broadcast):
        return [idx.value]
    if isinstance(idx, tirx.Shuffle) and all(_is_scalar(v) for v in idx.vectors):
        # lanes gathered one by one (a negative vector index legalized lane by lane)
        return [idx.vectors[int(i)] for i in idx.indices]
    return [idx]


def _is_scalar(e) -> bool:
    return "x" not in str(e.ty)


def _grid_loops(body) -> list:
    """The outermost ``For`` of each lowered CPU kernel (its loop over blocks)."""
    if isinstance(body, tirx.For):
        return [body]
    if isinstance(body, tirx.AttrStmt):
        return _grid_loops(body.body)
    if isinstance(body, tirx.SeqStmt):
        return [g for s in body.seq for g in _grid_loops(s)]
    return []


@function_pass("tl.CheckBounds")
def CheckBounds(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """CPU: guard every access not proven in range and raise ``OutOfBoundsError`` after the
    grid for the first one that failed (see the module docstring)."""
    if not is_cpu(target_of(func)):
        return func
    checker = _Checker(func)
    body = checker.stmt(func.body)
    if checker.err is None:
        return func.with_body(body)
    err, width = checker.err, checker.width
    name = str(func.attrs["global_symbol"]) if "global_symbol" in func.attrs else "main"
    c = tirx.Var("c", "int64")
    i = tirx.Var("i", "int64")
    zero = tirx.For(i, tirx.const(0, "int64"), tirx.const(CHUNKS * width, "int64"),
                    tirx.ForKind.SERIAL, tirx.BufferStore(err, tirx.const(0, "int64"), [i]))
    report = None
    for n, site in reversed(list(enumerate(checker.sites, 1))):
        if site.buffer is None:
            call = tirx.Evaluate(tirx.call_packed(DIVISION, name, site.where))
            report = tirx.IfThenElse(tirx.BufferLoad(err, [c * width]) == n, call, report)
            continue
        args = [name, site.buffer.name, site.access, site.where, site.ndim]
        args += [tirx.BufferLoad(err, [c * width + 1 + d]) for d in range(site.ndim)]
        args += [_dim(d, func) for d in site.buffer.shape]
        call = tirx.Evaluate(tirx.call_packed(CALLBACK, *args))
        report = tirx.IfThenElse(tirx.BufferLoad(err, [c * width]) == n, call, report)
    epilogue = tirx.For(c, tirx.const(0, "int64"), tirx.const(CHUNKS, "int64"),
                        tirx.ForKind.SERIAL, report)
    return func.with_body(seq([tirx.AllocBuffer(err), zero, body, epilogue]))


def _dim(d, func: tirx.PrimFunc):
    """A shape dim for the error message: its value at run time when the function's
    parameters define it, else its text."""
    if isinstance(d, tirx.IntImm):
        return tirx.const(int(d), "int64")
    known = {v.__chandle__() for p in func.params for v in _vars(p)}
    if all(v.__chandle__() in known for v in _free_vars(d)):
        return tirx.Cast("int64", d)
    return str(d)


def _vars(p) -> list:
    if is_buffer_var(p):
        return [v for s in p.shape for v in _free_vars(s)]
    return [p]


def _free_vars(e) -> list:
    out: list = []
    tvm_ffi.structural_walk(e, (tvm.ir.Var, out.append))
    return out
