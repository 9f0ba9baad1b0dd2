"""``@T.prim_func``: TVMScript's parser plus the tile language's post-processing and errors.

Errors raised while the program is parsed (a tile operator's checks, a bad dtype, TVMScript's
own complaints) come out as :class:`tilelang.errors.DSLError` whose message names the op and
shows the user's source line; a value of the wrong type gives :class:`DSLTypeError`.  After
parsing, every element access with constant indices is checked against the buffer's static
shape.

Python in a kernel body follows the public TileLang (:func:`tile_syntax`): a name bound once to
a Python value (``BK = 64``, ``dtype = "int32"``, ``scale = 0.5``) stays that value, chained
assignments ``a = b = expr`` evaluate ``expr`` once, and generator expressions run as Python.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import sys
from typing import Any, Callable

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.error import DiagnosticError
from tvm.script.parser.core import utils as _utils
from tvm.script.parser.core.entry import parse as _parse
from tvm.tirx import PrimFunc

from tvm.script.parser.core import dispatch, doc
from tvm.script.parser.core.evaluator import ExprEvaluator

from ..errors import DSLError, DSLTypeError, source_location
from ..ops.atomic import check_eager_results, eager_results
from .conditions import truthy_conditions
from .loop import check_parallel_jumps, clear_pending, mark_parallel_loops, python_steps


def prim_func(func: Callable | None = None, private: bool = False,
              check_well_formed: bool = True):
    """Parse a Python function written in the tile language into a ``PrimFunc``."""

    def decorate(fn: Callable) -> PrimFunc:
        if not inspect.isfunction(fn):
            raise TypeError(f"T.prim_func expects a function, got {fn!r}")
        from . import lazy

        if lazy.is_lazy(fn):  # parameters typed in the body, T.empty outputs
            return lazy.prim_func(fn)
        extra_vars = _utils.inspect_function_capture(fn)
        enclosing_annotation_names(fn, extra_vars)
        clear_pending()
        eager_results.clear()
        try:
            with scalar_bindings() as bindings:
                f = _parse(fn, extra_vars, check_well_formed=check_well_formed)
            f = after_parse(f)
        except DiagnosticError as err:
            cause = _root_cause(err)
            kind = DSLTypeError if isinstance(cause, TypeError) else DSLError
            if isinstance(cause, DSLError) and isinstance(cause, AssertionError):
                kind = type(cause)  # a check the public API raises as an AssertionError
            dsl = kind(_message(err))
            dsl.cause = cause  # the op's own exception, for debugging
            raise dsl from None
        finally:
            clear_pending()
        check_parsed(f, bindings)
        setattr(f, "__name__", fn.__name__)
        return f

    if func is not None:
        return decorate(func)
    setattr(decorate, "dispatch_token", "tirx")
    return decorate


setattr(prim_func, "dispatch_token", "tirx")


def after_parse(f: PrimFunc) -> PrimFunc:
    """The tile language's rewrites of a function TVMScript parsed: multi-dimensional
    ``T.Parallel`` and ``T.Persistent`` loops, negative steps, conditions on numbers,
    bfloat16 scalar parameters."""
    return bfloat16_scalars(truthy_conditions(python_steps(mark_parallel_loops(f))))


def bfloat16_scalars(f: PrimFunc) -> PrimFunc:
    """A bfloat16 scalar parameter is passed as a float32 one (TVM's calling convention has
    no bfloat16 scalar) and rounded to bfloat16 where the body reads it."""
    from tvm import tirx
    from tvm.tirx.buffer import is_buffer_var

    from ..ir_utils import substitute

    vmap, params = {}, []
    for p in f.params:
        if not is_buffer_var(p) and str(getattr(p.ty, "dtype", "")) == "bfloat16":
            wide = tirx.Var(p.name, "float32")
            vmap[p] = tirx.Cast("bfloat16", wide)
            params.append(wide)
        else:
            params.append(p)
    if not vmap:
        return f
    return tirx.PrimFunc(params, substitute(f.body, vmap), f.ret_type, f.attrs)


def check_parsed(f: PrimFunc, bindings) -> None:
    """The checks of a parsed function (each raises :class:`DSLError` naming the line)."""
    check_bindings(f, bindings)
    check_indices(f)
    check_parallel_jumps(f)
    check_eager_results(f)


def enclosing_annotation_names(fn: Callable, extra_vars: dict) -> None:
    """Give the names ``fn``'s parameter annotations read their lexical values: an enclosing
    function's local (a kernel factory's ``dtype`` argument) shadows a module global of the
    same name.  A name used only in an annotation is not captured in ``fn``'s closure, and
    TVMScript would otherwise read the global (silently the wrong dtype or shape), also under
    PEP 563.  The enclosing functions are those ``fn.__qualname__`` names, found among the
    frames running while ``fn`` is decorated."""
    enclosing = _utils._get_enclosing_scope_names(fn.__qualname__)
    if not enclosing:
        return
    closure = _utils.get_func_nonlocals(fn)
    names = [n for n in _utils._collect_annotation_names(fn) if n not in closure]
    frame = sys._getframe(1)
    while frame is not None and names:
        if frame.f_code.co_name in enclosing:
            for n in [n for n in names if n in frame.f_locals]:
                extra_vars[n] = frame.f_locals[n]
                names.remove(n)
        frame = frame.f_back


PYTHON_VALUES = (bool, int, float, str)


BLOCKS = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try)


def rebound_names(tree: ast.AST) -> set[str]:
    """The names that a body changes from inside a nested block: a name assigned in a loop,
    branch or ``with`` body other than the block holding its other assignments (``acc = 0``
    then ``for ...: acc = acc + x``), or updated with ``+=``.  Assignments that all sit in the
    same block (counting both arms of one ``if`` as the same) are plain Python rebinding."""
    where: dict[str, set[tuple]] = {}
    rebound: set[str] = set()

    def targets(target, blocks):
        if isinstance(target, ast.Name):
            where.setdefault(target.id, set()).add(blocks)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                targets(t, blocks)
        elif isinstance(target, ast.Starred):
            targets(target.value, blocks)

    def visit(node, blocks):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                targets(t, blocks)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) \
                and isinstance(node.target, ast.Name):
            rebound.add(node.target.id)
        elif isinstance(node, ast.NamedExpr):
            targets(node.target, blocks)
        inner = blocks + (id(node),) if isinstance(node, BLOCKS) else blocks
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, ())
    return rebound | {name for name, blocks in where.items() if len(blocks) > 1}


@contextlib.contextmanager
def tile_syntax():
    """While a body is parsed, give three Python constructs the public TileLang's meaning
    (TVMScript alone refuses the last two and makes every bound value a kernel scalar):

    - ``x = v`` where ``v`` is a Python value (bool, int, float, str) or an int32 constant
      binds ``x`` to ``v`` itself, so that Python code can keep computing with it
      (``next_power_of_2(x)``, ``T.alloc_shared((x, 64))``, ``indices_dtype = "int32"``),
      unless the body changes ``x`` from a nested block (:func:`rebound_names`): such a name
      stays a mutable kernel scalar, which ``acc = 0`` ... ``for ...: acc = acc + A[i]``
      needs; its first value gives its type, and a float value assigned later that the type
      would cut (``acc = 0`` then ``acc = acc + A[i]`` of a float ``A``) is a ``DSLError``.
    - ``a = b = expr`` evaluates ``expr`` once and assigns it to each target, left to right.
    - a generator expression (``sum(n // 64 for n in sizes)``) runs as Python, as list
      comprehensions already do.
    - ``assert cond, msg`` whose ``cond`` is a Python bool is checked while the body is parsed
      (a false one raises :class:`DSLError` with ``msg``) instead of becoming a kernel
      assertion.
    - ``with T.Kernel(n) as (bx,):`` unpacks a one-dimensional kernel's block index like a
      one-element tuple."""
    from tvm.tirx.script import builder as T_builder
    from tvm.tirx.script.parser import parser as tvm_parser

    original_bind = tvm_parser.bind_assign_value
    key, assert_key, with_key = ("tirx", "Assign"), ("tirx", "Assert"), ("tirx", "With")
    original_with = dispatch.ParseVTable[with_key]
    original_assign = dispatch.ParseVTable[key]
    original_assert = dispatch.ParseVTable[assert_key]
    original_visit = ExprEvaluator._visit_node
    seen: dict[int, tuple[Any, set[str] | None]] = {}
    typed_by: dict = {}  # kernel scalar (its buffer) -> the Python value that typed it

    def mutable(self, name: str) -> bool:
        source = self.diag.source  # the function, or the macro, being parsed
        hit = seen.get(id(source))
        if hit is None or hit[0] is not source:
            try:
                hit = (source, rebound_names(ast.parse(source.source)))
            except SyntaxError:  # no source text to read: every name stays a kernel scalar
                hit = (source, None)
            seen[id(source)] = hit
        return hit[1] is None or name in hit[1]

    def bind(self, node, var_name, value, *args, **kwargs):
        if callable(value) and not isinstance(value, (tvm.ir.Expr, tvm.runtime.Object, str)):
            return value  # a function or class (op = T.cumsum): no kernel value can hold it
        if isinstance(value, tirx.IntImm) and str(value.ty) == "int32":
            const = int(value.value)
        elif isinstance(value, PYTHON_VALUES):
            const = value
        else:
            const = None
        if const is not None and not mutable(self, var_name):
            return const
        res = original_bind(self, node, var_name, value, *args, **kwargs)
        if const is not None and isinstance(res, tvm.ir.TensorLoad):
            typed_by[res.source.__chandle__()] = const
        return res

    def visit_assign(self, node):
        if len(node.targets) == 1:
            target = node.targets[0]
            old = self.var_table.get().get(target.id) if isinstance(target, doc.Name) else None
            first = typed_by.get(old.source.__chandle__()) \
                if isinstance(old, tvm.ir.TensorLoad) else None
            if first is None:
                return original_assign(self, node)
            value = self.eval_expr(node.value)  # a new value of a scalar its first one typed
            vty = str(value.ty) if isinstance(value, tvm.ir.Expr) else \
                "float32" if isinstance(value, float) else None
            if vty is not None and _narrows(vty, str(old.ty)):
                self.report_error(node, f"{target.id} is a kernel scalar of type {old.ty} (its "
                                  f"first value {first!r} gave it that type); the {vty} value "
                                  f"assigned here would be cut to {old.ty}: give it a first "
                                  f"value of the wider type ({target.id} = T.{vty}(0)) or "
                                  "declare it with T.alloc_var")
            return T_builder.buffer_store(old.source, value, [0])
        value = self.eval_expr(node.value)
        for i, target in enumerate(node.targets):
            name = f"__tl_chained_{id(node)}_{i}"
            self.var_table.add(name, value, allow_shadowing=True)
            single = doc.Assign(targets=[target], value=doc.Name(id=name, ctx=doc.Load(),
                                **_span(node.value)), **_span(node))
            original_assign(self, single)
            if i == 0 and isinstance(value, tvm.ir.Expr) and isinstance(target, doc.Name):
                value = self.var_table.get().get(target.id, value)  # the expression once
        return None

    def visit_assert(self, node):
        cond = self.eval_expr(node.test)
        if not isinstance(cond, (bool, np.bool_)):
            return original_assert(self, node)
        if not cond:
            msg = self.eval_expr(node.msg) if node.msg is not None else "assertion failed"
            self.report_error(node, f"assert: {msg}")
        return None

    def visit_with(self, node):
        if not any(isinstance(item.optional_vars, (doc.Tuple, doc.List)) for item in node.items):
            return original_with(self, node)
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.var_table.with_frame())
            for item in node.items:
                frame = self.eval_expr(item.context_expr)
                if not hasattr(frame, "__enter__") or not hasattr(frame, "__exit__"):
                    self.report_error(item.context_expr,
                                      "Invalid context expression in the with-statement.")
                rhs = stack.enter_context(frame)
                target = item.optional_vars
                if isinstance(target, (doc.Tuple, doc.List)) and isinstance(rhs, tvm.ir.Expr):
                    rhs = (rhs,)  # `as (bx,)` of a one-dimensional T.Kernel
                if target is not None:
                    self.eval_assign(target=target, source=rhs,
                                     bind_value=tvm_parser.bind_with_value)
            self.visit_body(node.body)
        return None

    def visit_node(self, node):
        if isinstance(node, doc.GeneratorExp):
            return self._add_intermediate_result(self._eval_expr(node))
        return original_visit(self, node)

    tvm_parser.bind_assign_value = bind
    dispatch.ParseVTable[key] = visit_assign
    dispatch.ParseVTable[assert_key] = visit_assert
    dispatch.ParseVTable[with_key] = visit_with
    ExprEvaluator._visit_node = visit_node
    try:
        yield
    finally:
        ExprEvaluator._visit_node = original_visit
        dispatch.ParseVTable[with_key] = original_with
        dispatch.ParseVTable[assert_key] = original_assert
        dispatch.ParseVTable[key] = original_assign
        tvm_parser.bind_assign_value = original_bind


def _narrows(value: str, scalar: str) -> bool:
    """Whether storing a ``value``-typed expression in a ``scalar``-typed variable loses what
    Python would keep: a float into an integer, or a float into a narrower float."""
    v, t = tvm.DataType(value), tvm.DataType(scalar)
    if not v.is_float:
        return False
    return not t.is_float or t.bits < v.bits


def _span(node) -> dict:
    return {k: getattr(node, k, None) for k in ("lineno", "col_offset", "end_lineno",
                                                 "end_col_offset")}


@contextlib.contextmanager
def scalar_bindings():
    """While a body is parsed (``T.prim_func`` and eager bodies alike), record the defining
    value of each kernel scalar made by ``x = expr`` (see
    :class:`tilelang.ops.region.ScalarBindings`), with the :func:`tile_syntax` rules on."""
    from tvm.tirx.script.parser import parser as tvm_parser

    from ..ops import region as R

    bindings = R.ScalarBindings()

    def bind(self, node, var_name, value, *args, **kwargs):
        res = original(self, node, var_name, value, *args, **kwargs)
        if isinstance(res, tvm.ir.TensorLoad) and isinstance(value, tvm.ir.Expr) \
                and not res.same_as(value):  # a new scalar, defined by value
            R.record_binding(res.source, value)
        return res

    with tile_syntax():
        original = tvm_parser.bind_assign_value  # tile_syntax's, around TVMScript's
        tvm_parser.bind_assign_value = bind
        R._bindings.append(bindings)
        try:
            yield bindings
        finally:
            R._bindings.pop()
            tvm_parser.bind_assign_value = original


def check_bindings(func: PrimFunc, bindings) -> None:
    """Raise :class:`DSLError` if a shape check relied on the defining value of a scalar that
    the body assigns more than once."""
    if not bindings.relied:
        return
    stores: dict = {}
    tvm_ffi.structural_walk(func.body, (tirx.BufferStore, lambda s: stores.__setitem__(
        s.buffer.__chandle__(), stores.get(s.buffer.__chandle__(), 0) + 1)))
    for key, (buf, claim) in bindings.relied.items():
        if stores.get(key, 0) > 1:
            raise DSLError(f"a tile operator's shape check needs {claim}, which holds for the "
                           f"value {buf.name} is defined with, but {buf.name} is assigned "
                           f"{stores[key]} times; compute the slice bounds from values that "
                           f"do not change")


def _message(err: DiagnosticError) -> str:
    msg = str(err).strip()
    return msg[len("error: "):] if msg.startswith("error: ") else msg


def _root_cause(err: BaseException) -> BaseException | None:
    cause = err.__cause__ or err.__context__
    while cause is not None and isinstance(cause, DiagnosticError):
        cause = cause.__cause__ or cause.__context__
    return cause


def check_indices(func: PrimFunc) -> None:
    """Raise :class:`DSLError` for a load or store with an index that is not an integer
    (``A[Idx[i]]`` of a float ``Idx``) or a constant index outside the buffer's static extent
    in that dimension (``A[100]`` of a 64-element tensor).  A negative index down to
    ``-extent`` counts from the end (``A[-1]`` is the last element)."""
    bad: list[str] = []

    def report(node, buf, idx, prefix: str, what: str) -> None:
        where = source_location(node.span)
        bad.append(f"{prefix}{buf.name}[{', '.join(str(x) for x in idx)}]: {what}"
                   + (f"\n  {where}" if where else ""))

    def check(node):
        store = isinstance(node, tirx.BufferStore)
        buf = node.buffer if store else node.source
        idx = list(node.indices)
        if bad or len(idx) != len(buf.shape):
            return
        for d, (i, n) in enumerate(zip(idx, buf.shape)):
            if not str(i.ty).startswith(("int", "uint")):
                return report(node, buf, idx, "", f"index {i} is {i.ty}; indices are integers "
                                                  f"(T.cast(x, \"int32\"))")
            if isinstance(i, tirx.IntImm) and isinstance(n, tirx.IntImm) \
                    and not -n.value <= i.value < n.value:
                shape = tuple(int(x) for x in buf.shape)
                return report(node, buf, idx, "store to " if store else "load of ",
                              f"index {i.value} is out of bounds for dimension {d} of "
                              f"{buf.name} with shape {shape} (valid: {-n.value} to "
                              f"{n.value - 1})")

    # the callback only records: an exception raised inside the walk would cross TVM's FFI
    tvm_ffi.structural_walk(func.body, [(tirx.BufferStore, check), (tvm.ir.TensorLoad, check)])
    if bad:
        raise DSLError(bad[0])
