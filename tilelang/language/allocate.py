"""Allocations inside a kernel: shared tiles, fragments (a block's register tile), per-thread
locals and scalars, and mbarriers.  Each returns the buffer (a scalar for ``alloc_var``).
Every dimension of a shape is a positive integer or an integer expression."""

from __future__ import annotations

from typing import Any, Sequence

from tvm import tirx
from tvm.script import tirx as _T

from ..errors import DSLError, DSLTypeError
from ..utils.dtype import canonical_dtype, int_range
from .extent import positive_extent

# Storage scopes; the passes key on these names.
SHARED = "shared.dyn"
FRAGMENT = "local.fragment"
LOCAL = "local"
VAR = "local.var"
BARRIER = "shared.barrier"


def _shape(shape: Any, op: str) -> list:
    """The dimensions of ``shape`` (one extent or a sequence), each a positive extent."""
    dims = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    if not dims:
        raise DSLError(f"{op}: the shape needs at least one dimension")
    return [positive_extent(d, op, f"dimension {i} of shape {tuple(dims)}")
            for i, d in enumerate(dims)]


def alloc_shared(shape: Sequence | int, dtype: Any, scope: str = SHARED):
    """A tile in the block's shared memory (``scope="shared"`` for static shared memory)."""
    op = "T.alloc_shared"
    return _T.alloc_buffer(_shape(shape, op), canonical_dtype(dtype, op), scope=scope)


def alloc_fragment(shape: Sequence | int, dtype: Any, scope: str = FRAGMENT):
    """A register tile of the whole block; the compiler distributes its elements over the
    block's threads (see ``tilelang.layout.Fragment``)."""
    op = "T.alloc_fragment"
    return _T.alloc_buffer(_shape(shape, op), canonical_dtype(dtype, op), scope=scope)


def alloc_local(shape: Sequence | int, dtype: Any, scope: str = LOCAL):
    """A per-thread array."""
    op = "T.alloc_local"
    return _T.alloc_buffer(_shape(shape, op), canonical_dtype(dtype, op), scope=scope)


def alloc_global(shape: Sequence | int, dtype: Any, scope: str = "global"):
    op = "T.alloc_global"
    return _T.alloc_buffer(_shape(shape, op), canonical_dtype(dtype, op), scope=scope)


def alloc_var(dtype: Any, init: Any = None, scope: str = VAR):
    """A per-thread scalar variable; assigning to the name (``x = x + 1``) stores into it.
    A Python number ``init`` becomes a constant of ``dtype`` (a float64 variable keeps a value
    beyond float32's range)."""
    dt = canonical_dtype(dtype, "T.alloc_var")
    v = _T.alloc_scalar(dt, scope=scope)
    if init is not None:
        scalar = getattr(v, "scalar", v)
        if isinstance(init, int) and not isinstance(init, bool) and \
                str(dt).startswith(("int", "uint")):
            low, high = int_range(str(dt))
            if not low <= init <= high:
                raise DSLError(f"T.alloc_var: init {init} does not fit {dt} ({low} to {high})")
        if isinstance(init, (bool, int, float)):
            init = tirx.const(init, dt)
        elif not isinstance(init, tirx.PrimExpr):
            raise DSLTypeError(f"T.alloc_var: init must be a number or a kernel expression, "
                               f"got {type(init).__name__} {init!r}")
        _T.buffer_store(scalar.source, init, [0])
    return v
