"""Scalar helpers of the public language that TVMScript lacks: ``T.clamp``,
``T.sync_threads`` and the fast-math spellings ``T.__exp``, ``T.__log2`` ...

The fast-math names compute the same function as their precise counterparts here (``T.__exp``
is ``T.exp``); whether the device code uses an approximate instruction is decided by the
``tl.enable_fast_math`` pass config, for the whole kernel."""

from __future__ import annotations

from typing import Any

from tvm import tirx
from tvm.script import tirx as _T

from ..errors import DSLError


def clamp(value: Any, lo: Any, hi: Any) -> Any:
    """``value`` limited to ``[lo, hi]``: ``min(max(value, lo), hi)``."""
    return _T.min(_T.max(value, lo), hi)


def sync_threads(barrier_id: Any = None, arrive_count: Any = None) -> Any:
    """A barrier for all threads of the block (``__syncthreads()``).  The named-barrier form
    ``T.sync_threads(id, count)`` is not supported here: it raises ``DSLError``."""
    if barrier_id is not None or arrive_count is not None:
        raise DSLError("T.sync_threads: the named-barrier form (barrier_id, arrive_count) is "
                       "not supported; use T.sync_threads() for the whole block")
    return tirx.call_intrin("int32", "tirx.tvm_storage_sync", "shared")


def _same_as(fn, name: str):
    def intrinsic(x: Any) -> Any:
        return fn(x)

    intrinsic.__name__ = name
    intrinsic.__doc__ = f"``T.{name}(x)``: the same function as ``{fn.__name__}`` (see module doc)."
    return intrinsic


FAST_MATH = {
    "__exp": _T.exp, "__exp2": _T.exp2, "__exp10": _T.exp10, "__log": _T.log,
    "__log2": _T.log2, "__log10": _T.log10, "__sin": _T.sin, "__cos": _T.cos,
    "__tan": _T.tan, "__sqrt": _T.sqrt, "__rsqrt": _T.rsqrt,
}
globals().update({name: _same_as(fn, name) for name, fn in FAST_MATH.items()})

__all__ = ["clamp", "sync_threads", *FAST_MATH]
