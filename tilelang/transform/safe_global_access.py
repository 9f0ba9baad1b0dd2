"""``GuardGlobalAccesses`` (GPU targets): an element access of a global tensor that the compiler
cannot prove inside the tensor's shape is guarded, so that it never touches memory outside
the tensor: a load outside gives 0 and a store outside is skipped (the public TileLang meaning
of an out-of-range global access).

The typical case is an index read from memory, which no analysis can bound: a gather
``KV_shared[i, d] = KV[b, Indices[b, s, i], d]`` whose index table marks unused slots with
``seq_len_kv`` (one past the end) reads 0 for those rows instead of whatever lies past the
tensor (NaN or Inf there would poison every row that multiplies them by 0).  Accesses proven
in range under the loop ranges, the thread and block extents and the enclosing conditions
(``if`` statements, ``T.if_then_else`` guards such as the zero fill of a ``T.copy`` at a
tensor's edge) cost nothing.  Shared memory, fragments and locals are not guarded (the CPU
backend checks them: ``CheckBounds``), nor are asynchronous copies (TMA, cp.async: the
``T.copy`` lowerings handle the tensor's edges) and atomics.  The pass config
``tl.disable_safe_memory_access`` turns the guards off.
"""

from __future__ import annotations

import logging

import tvm
from tvm import tirx

from ..engine.target import is_cpu
from . import pass_config
from .check_bounds import _Checker
from .passes import function_pass, target_of

log = logging.getLogger("tilelang")


class _SimplifyingAnalyzer:
    """An analyzer that simplifies each condition it is told to assume: it matches a known
    condition only in its own simplified form (a copy's edge guard ``bx * 16 + (r % 32 // 4
    * 2 + tx // 64) < 1000`` would otherwise not prove the same access in range)."""

    def __init__(self, az):
        self._az = az

    def constraint_scope(self, cond):
        return self._az.constraint_scope(self._az.simplify(cond))

    def __getattr__(self, name):
        return getattr(self._az, name)


class _GlobalGuard(_Checker):
    """``_Checker``'s reasoning, applied to global tensors only and without a failure
    record: an unproven access is guarded and nothing else."""

    def __init__(self, func: tirx.PrimFunc):
        super().__init__(func)
        self.az = _SimplifyingAnalyzer(self.az)

    def _stmt(self, s):
        if isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent":
            var = s.node.var if hasattr(s.node, "var") else s.node
            self.az.bind(var, tvm.ir.Range.from_min_extent(tirx.const(0, var.ty), s.value),
                         allow_override=True)
        if isinstance(s, (tirx.LetStmt, tirx.Bind)) and not _is_integer(s.value):
            # a pointer (a TMA descriptor, a cvta): nothing to reason about
            return type(s)(s.var, self.expr(s.value), span=s.span)
        return super()._stmt(s)

    def access(self, buf, indices: list, access: str, ctx: tuple):
        if buf.scope() != "global":
            return None
        ok = self._unproven(buf, indices, ctx)
        if ok is None:
            return None
        log.debug("guarded a %s of %s%s (not provably in range) %s", access, buf.name,
                  list(indices), self.where[-1])
        return ok

    def take(self):
        self.pending = []
        return None


def _is_integer(e) -> bool:
    return str(e.ty).startswith(("int", "uint"))


@function_pass("tl.GuardGlobalAccesses")
def GuardGlobalAccesses(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """GPU: guard each global access not proven in range (a load gives 0, a store is
    skipped); see the module docstring."""
    if is_cpu(target_of(func)) or pass_config.get(
            pass_config.PassConfigKey.TL_DISABLE_SAFE_MEMORY_ACCESS, False):
        return func
    return func.with_body(_GlobalGuard(func).stmt(func.body))


__all__ = ["GuardGlobalAccesses"]
