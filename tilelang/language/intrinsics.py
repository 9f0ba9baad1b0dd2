"""Scalar helpers of the public language that TVMScript lacks: ``T.clamp``,
``T.sync_threads``, ``T.access_ptr``, ``T.import_source`` and the fast-math spellings
``T.__exp``, ``T.__log2`` ...

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


ACCESS_TYPES = ("r", "w", "rw")


def access_ptr(base: Any, access_type: str = "r", extent: Any = None, offset: Any = 0) -> Any:
    """The address of ``base`` for an external call (``T.call_extern``): a buffer's first
    element, an element ``A[i, j]``, or the first element of a slice ``A[i, 0:8]``, moved
    ``offset`` elements on.  ``access_type`` (``"r"``, ``"w"``, ``"rw"``) declares what the
    callee does with the memory; ``extent`` is how many elements it touches (default: to the
    end of the slice, or of the buffer)."""
    from ..ops import region as R

    if access_type not in ACCESS_TYPES:
        raise DSLError(f"T.access_ptr: access_type must be one of {ACCESS_TYPES}, "
                       f"got {access_type!r}")
    base = getattr(base, "scalar", base)  # a T.alloc_var
    if R.is_buffer(base):
        buf, start, count = base, tirx.const(0, "int32"), None
    elif R.is_element(base) or R.is_region(base):
        region = R.region_of(base, "T.access_ptr", "base")
        buf = region.source
        start = buf.offset_of(R.mins(region))[-1]
        count = None
        if R.is_region(base):
            count = tirx.const(1, "int32")
            for e in R.extents(region):
                count = count * e
    else:
        raise DSLError(f"T.access_ptr: base must be a buffer, an element or a slice of one, "
                       f"got {base!r}")
    if count is None:
        total = tirx.const(1, "int32")
        for s in buf.shape:
            total = total * s
        count = total - start
    count = count - offset if extent is None else extent
    return buf.access_ptr(access_type, offset=start + offset, extent=count)


def call_extern(*args: Any, dtype: Any = None, span: Any = None) -> Any:
    """A call of an external (C++/CUDA) function: ``T.call_extern(dtype, name, *args)`` as in
    TVMScript, or ``T.call_extern(name, *args, dtype=dtype)`` as in the public TileLang.
    ``dtype`` is the call's result type."""
    from ..utils.dtype import canonical_dtype

    if dtype is None:
        if len(args) < 2:
            raise DSLError("T.call_extern needs a result dtype and a function name")
        dtype, args = args[0], args[1:]
    if not args or not isinstance(args[0], str):
        raise DSLError(f"T.call_extern: the function name must be a str, got {args[:1]!r}")
    dtype = "handle" if str(dtype) == "handle" else canonical_dtype(dtype, "T.call_extern")
    return _T.call_extern(dtype, *args, span=span)


def import_source(source: str) -> None:
    """Put ``source`` (C++/CUDA code: device functions that ``T.call_extern`` calls) at the
    top of the kernel's generated device code.  CUDA targets only: the CPU backend compiles
    no C++, so a kernel calling into the imported code cannot run there."""
    from .kernel import _current

    if not isinstance(source, str):
        raise DSLError(f"T.import_source: source must be a str, got {type(source).__name__}")
    frame = _T.attr(0, "tl.prelude", source)
    frame.__enter__()
    _current("T.import_source")._frames.append(frame)


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

__all__ = ["access_ptr", "call_extern", "clamp", "import_source", "sync_threads", *FAST_MATH]
