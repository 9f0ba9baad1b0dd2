"""Small IR helpers shared by the passes and the tile operators (below both): a statement
mutator, substitution, buffer remapping.

TVM 0.27 exposes no Python ``StmtMutator``; :class:`StmtMutator` rebuilds the handful of
statement kinds tile programs contain and leaves expressions to ``tvm_ffi.structural_map``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var


class StmtMutator:
    """Post-order rebuild of a statement tree; override ``visit_<Kind>`` to rewrite a node.

    Each ``visit_*`` receives the node whose children were *not yet* visited and returns a
    statement (or ``None`` to drop it); call ``self.generic(node)`` for the default descent.
    """

    def __call__(self, stmt: tirx.Stmt) -> tirx.Stmt:
        out = self.visit(stmt)
        return out if out is not None else nop()

    def visit(self, stmt):
        fn = getattr(self, "visit_" + type(stmt).__name__, None)
        return fn(stmt) if fn is not None else self.generic(stmt)

    def generic(self, s):
        if isinstance(s, tirx.SeqStmt):
            return seq(self.visit(x) for x in s.seq)
        # rebuilt nodes keep their span: later errors name the user's source line
        if isinstance(s, tirx.For):
            body = self(s.body)
            return tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding,
                            s.annotations, s.step, span=s.span)
        if isinstance(s, tirx.AttrStmt):
            return tirx.AttrStmt(s.node, s.attr_key, s.value, self(s.body), span=s.span)
        if isinstance(s, tirx.IfThenElse):
            els = self.visit(s.else_case) if s.else_case is not None else None
            return tirx.IfThenElse(s.condition, self(s.then_case), els, span=s.span)
        if isinstance(s, tirx.While):
            return tirx.While(s.condition, self(s.body), span=s.span)
        return s


def peel_parallel(loop: tirx.For) -> tuple[list, list, tirx.Stmt]:
    """Loop vars, extents and body of a nest of parallel (``T.Parallel``) loops."""
    vars_, exts, body = [], [], loop
    while isinstance(body, tirx.For) and body.kind == tirx.ForKind.PARALLEL:
        vars_.append(body.loop_var)
        exts.append(body.extent)
        body = body.body
    return vars_, exts, body


def walk(node: Any, types, fn: Callable[[Any], Any], order: str = "pre") -> None:
    """Call ``fn`` on every node of ``types`` below ``node``."""
    tvm_ffi.structural_walk(node, (types, fn), order=order)


def find_all(node: Any, types, pred: Callable[[Any], bool] = lambda _: True) -> list:
    found: list = []
    walk(node, types, lambda x: found.append(x) if pred(x) else None)
    return found


def map_nodes(node: Any, callbacks) -> Any:
    """``tvm_ffi.structural_map`` whose callbacks may raise: the exception comes out with its
    own type (crossing TVM's FFI would turn it into a RuntimeError)."""
    errors: list[BaseException] = []

    def guard(fn):
        def run(x):
            if errors:
                return x
            try:
                return fn(x)
            except Exception as err:  # re-raised below, after the map unwinds
                errors.append(err)
                return x

        return run

    if not isinstance(callbacks, list):
        callbacks = [callbacks]
    out = tvm_ffi.structural_map(node, [(t, guard(fn)) for t, fn in callbacks])
    if errors:
        raise errors[0]
    return out


def _key(obj) -> int:
    return obj.__chandle__()


def substitute(node: Any, vmap: dict) -> Any:
    """Replace free variables: ``vmap`` maps a ``Var`` to the expression that replaces it."""
    if not vmap:
        return node
    table = {_key(k): v for k, v in vmap.items()}

    def on_var(v):
        return table.get(_key(v), v)

    return map_nodes(node, (tvm.ir.Var, on_var))


def remap_buffers(node: Any, fn: Callable[[Any], Any | None]) -> Any:
    """Replace buffer variables: ``fn(buf)`` returns the new buffer or ``None`` to keep it.
    Each buffer is replaced by the same new buffer at every use and definition."""
    memo: dict[int, Any] = {}

    def on_var(v):
        if not is_buffer_var(v):
            return v
        k = _key(v)
        if k not in memo:
            new = fn(v)
            memo[k] = v if new is None else new
        return memo[k]

    return map_nodes(node, (tvm.ir.Var, on_var))


def uses_var(node: Any, var) -> bool:
    k = _key(var)
    hit = []

    def on_var(v):
        if _key(v) == k:
            hit.append(v)
            return tvm_ffi.VisitInterrupt(v)
        return None

    tvm_ffi.structural_walk(node, (tvm.ir.Var, on_var), order="pre")
    return bool(hit)


LAUNCH_ATTRS = ("thread_extent", "tl.prelude")


def launch_chain(stmt: tirx.Stmt) -> tuple[list, tirx.Stmt]:
    """The launch attributes (``thread_extent``, ``tl.prelude``) nested at ``stmt``, outermost
    first, and the kernel body under them."""
    chain, body = [], stmt
    while isinstance(body, tirx.AttrStmt) and body.attr_key in LAUNCH_ATTRS:
        chain.append(body)
        body = body.body
    return chain, body


def thread_extent(kernel: tirx.Stmt) -> tuple:
    """The ``threadIdx.x`` variable of ``kernel`` and its extent, else ``(None, None)``."""
    out = []

    def on_attr(a):
        if a.attr_key == "thread_extent" and a.node.thread_tag == "threadIdx.x":
            out.append((a.node.var, a.value))

    tvm_ffi.structural_walk(kernel, (tirx.AttrStmt, on_attr))
    return out[0] if out else (None, None)


def relaunch(chain: list, body: tirx.Stmt) -> tirx.Stmt:
    """``body`` under the launch attributes ``chain`` (as :func:`launch_chain` returned them)."""
    for a in reversed(chain):
        body = tirx.AttrStmt(a.node, a.attr_key, a.value, body)
    return body


class _EachKernel(StmtMutator):
    def __init__(self, fn):
        self.fn = fn

    def visit_AttrStmt(self, s):
        return self.fn(s) if s.attr_key in LAUNCH_ATTRS else self.generic(s)


def map_kernels(stmt: tirx.Stmt, fn: Callable[[tirx.Stmt], tirx.Stmt]) -> tirx.Stmt:
    """``stmt`` with each kernel (one ``T.Kernel``: its outermost launch attribute and all
    below it) replaced by ``fn(kernel)``.  A function may launch several kernels in program
    order; a pass whose analysis is per launch (threads, shared memory, layouts) runs on each."""
    return _EachKernel(fn)(stmt)


def kernels_of(stmt: tirx.Stmt) -> list[tirx.Stmt]:
    """The kernels ``stmt`` launches, in program order (see :func:`map_kernels`)."""
    found: list = []
    map_kernels(stmt, lambda k: found.append(k) or k)
    return found


def nop() -> tirx.Stmt:
    return tirx.Evaluate(tirx.const(0, "int32"))


def seq(stmts: Iterable[tirx.Stmt]) -> tirx.Stmt:
    """One statement for a sequence: flattened, ``None`` dropped, a no-op when empty."""
    flat = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, tirx.SeqStmt):
            flat.extend(s.seq)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return tirx.SeqStmt(flat) if flat else nop()


def rebuffer(buf, scope: str | None = None, shape=None, name: str | None = None):
    """A new buffer variable like ``buf`` with another scope or shape."""
    return tirx.decl_buffer(
        list(shape if shape is not None else buf.shape),
        buf.dtype,
        name or buf.name,
        scope=scope if scope is not None else buf.scope(),
    )
