"""``T.alloc_reducer`` and ``T.finalize_reducer`` (semantics: ``tilelang.ops.reducer``)."""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import DSLError, TileOpError
from ..ops import region as R
from ..ops import reducer as _ops
from .allocate import alloc_fragment, alloc_local

REPLICATIONS = (None, "all", "none")
# the reducers allocated while programs are parsed, and their ops
_allocated: dict = {}


def alloc_reducer(shape: Sequence | int, dtype: Any, op: str = "sum",
                  replication: str | None = None):
    """A reducer of ``shape`` combining with ``op`` (``"sum"``, ``"max"`` or ``"min"``):
    ``replication="all"`` (the default) gives every thread its own copy; ``"none"`` a plain
    fragment.  Fill it with the op's identity (0 for sum: every thread's copy is counted;
    ``T.min_value`` for max, ``T.max_value`` for min), update it, then finalize it."""
    if op not in _ops.OPS:
        raise DSLError(f"T.alloc_reducer: op must be one of {', '.join(_ops.OPS)}, got {op!r}")
    if replication not in REPLICATIONS:
        raise DSLError(f"T.alloc_reducer: replication must be 'all' or 'none', got "
                       f"{replication!r}")
    buf = alloc_fragment(shape, dtype) if replication == "none" else alloc_local(shape, dtype)
    _allocated[buf] = op
    return buf


def finalize_reducer(reducer: Any, batch: int = 1):
    """Combine the threads' copies of ``reducer`` (from ``T.alloc_reducer``); every copy then
    holds the result.  ``batch`` is accepted for the public API: all elements are combined in
    one pass."""
    opname = "T.finalize_reducer"
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise DSLError(f"{opname}: batch must be a positive int, got {batch!r}")
    if not R.is_buffer(reducer) or reducer not in _allocated:
        raise TileOpError(f"{opname}: expects a buffer from T.alloc_reducer, got {reducer!r}")
    return _ops.finalize(reducer, _allocated[reducer])
