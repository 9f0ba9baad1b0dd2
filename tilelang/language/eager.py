"""The names of the eager ``@tilelang.jit`` style: ``T.const`` (sizes bound from the tensors a
call passes, or given to ``.compile``) and ``T.empty`` (an output the call allocates and
returns).  Both only have a meaning while an eager function is being built
(``tilelang/jit/eager.py`` sets up the :class:`EagerScope`)."""

from __future__ import annotations

import contextlib
import contextvars
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from tvm import tirx

from ..errors import DSLError
from ..utils.dtype import canonical_dtype


@dataclass
class EagerScope:
    """What one build of an eager function knows and collects.  ``consts`` maps each
    ``T.const`` name to its value; ``None`` means the sizes are still being discovered, and
    ``T.const`` then returns size variables to be matched against the tensors."""

    consts: dict[str, int] | None
    probed: dict[str, tirx.Var] = field(default_factory=dict)  # T.const names seen
    used: set = field(default_factory=set)  # T.const names looked up while building
    outputs: list = field(default_factory=list)  # T.empty buffers, in creation order


_scope: contextvars.ContextVar[EagerScope | None] = contextvars.ContextVar("tl_eager",
                                                                         default=None)


@contextlib.contextmanager
def eager_scope(scope: EagerScope) -> Iterator[EagerScope]:
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def _current(op: str) -> EagerScope:
    scope = _scope.get()
    if scope is None:
        raise DSLError(f"{op} is only meaningful in the body of an eager @tilelang.jit "
                       f"function (one that types its tensor parameters inside the body)")
    return scope


class ConstSize(int):
    """A ``T.const`` size: a Python int that TVMScript keeps a Python value when it is
    assigned in a kernel body (a plain int would become a scalar variable of the kernel)."""

    _is_meta_class = True


def split_names(names: str) -> list[str]:
    """``"M, N"`` or ``"M N"`` as ``["M", "N"]``."""
    out = [n for n in re.split(r"[,\s]+", names.strip()) if n]
    bad = [n for n in out if not n.isidentifier()]
    if not out or bad:
        raise DSLError(f"T.const({names!r}): expected identifiers separated by commas or spaces")
    return out


def const(names: str, dtype: Any = "int32") -> Any:
    """Sizes that are constants of the compiled kernel: ``M, N = T.const("M, N")``.  Each is
    bound from the shape of the tensor whose annotation uses it (``A: T.Tensor((M, K),
    dtype)``), or given by name to ``.compile(M=...)``; every distinct value compiles its own
    kernel.  One name gives one value, several a tuple."""
    scope = _current("T.const")
    dtype = canonical_dtype(dtype, "T.const")
    values = []
    for name in split_names(names):
        if scope.consts is None:
            var = scope.probed.setdefault(name, tirx.Var(name, str(dtype)))
            values.append(var)
        elif name in scope.consts:
            scope.used.add(name)
            values.append(ConstSize(scope.consts[name]))
        else:
            raise DSLError(f"T.const: the size {name!r} was not bound: no tensor annotation "
                           f"uses it as a dimension and it was not given by name "
                           f"(.compile({name}=...))")
    return values[0] if len(values) == 1 else tuple(values)


def empty(*shape: Any, dtype: Any = "float32", name: str | None = None):
    """An output tensor that the call allocates on the inputs' device: ``T.empty((M, N),
    dtype)`` or ``T.empty(M, N, dtype=dtype)``; return it from the function to receive it."""
    from tvm.script import tirx as _T

    from .proxy import Tensor

    scope = _current("T.empty")
    if shape and isinstance(shape[0], (list, tuple)):  # T.empty((M, N), dtype)
        if len(shape) > 2:
            raise DSLError("T.empty: give T.empty((dims...), dtype) or T.empty(*dims, dtype=)")
        if len(shape) == 2:
            dtype = shape[1]
        shape = tuple(shape[0])
    elif shape and isinstance(shape[-1], str):  # T.empty(M, N, T.float16)
        shape, dtype = shape[:-1], shape[-1]
    if not shape:
        raise DSLError("T.empty: give the output's shape")
    if scope.consts is None:  # sizes are still being discovered: nothing is built yet
        return Tensor(list(shape), dtype)
    buf = _T.arg(name or f"out{len(scope.outputs)}", Tensor(list(shape), dtype))
    scope.outputs.append(buf)
    return buf
