"""Allocations inside a kernel: shared tiles, fragments (a block's register tile), per-thread
locals and scalars, and mbarriers.  Each returns the buffer (a scalar for ``alloc_var``)."""

from __future__ import annotations

from typing import Any, Sequence

from tvm.script import tirx as _T

from ..utils.dtype import canonical_dtype

# Storage scopes; the passes key on these names.
SHARED = "shared.dyn"
FRAGMENT = "local.fragment"
LOCAL = "local"
VAR = "local.var"
BARRIER = "shared.barrier"


def _shape(shape: Any) -> list:
    if isinstance(shape, (list, tuple)):
        return list(shape)
    return [shape]


def alloc_shared(shape: Sequence | int, dtype: Any, scope: str = SHARED):
    """A tile in the block's shared memory (``scope="shared"`` for static shared memory)."""
    return _T.alloc_buffer(_shape(shape), canonical_dtype(dtype, "T.alloc_shared"), scope=scope)


def alloc_fragment(shape: Sequence | int, dtype: Any, scope: str = FRAGMENT):
    """A register tile of the whole block; the compiler distributes its elements over the
    block's threads (see ``tilelang.layout.Fragment``)."""
    return _T.alloc_buffer(_shape(shape), canonical_dtype(dtype, "T.alloc_fragment"), scope=scope)


def alloc_local(shape: Sequence | int, dtype: Any, scope: str = LOCAL):
    """A per-thread array."""
    return _T.alloc_buffer(_shape(shape), canonical_dtype(dtype, "T.alloc_local"), scope=scope)


def alloc_global(shape: Sequence | int, dtype: Any, scope: str = "global"):
    return _T.alloc_buffer(_shape(shape), canonical_dtype(dtype, "T.alloc_global"), scope=scope)


def alloc_var(dtype: Any, init: Any = None, scope: str = VAR):
    """A per-thread scalar variable; assigning to the name (``x = x + 1``) stores into it."""
    v = _T.alloc_scalar(canonical_dtype(dtype, "T.alloc_var"), scope=scope)
    if init is not None:
        scalar = getattr(v, "scalar", v)
        _T.buffer_store(scalar.source, init, [0])
    return v
