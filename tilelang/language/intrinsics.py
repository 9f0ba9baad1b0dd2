"""Scalar helpers of the public language that TVMScript lacks: ``T.clamp``,
``T.sync_threads``, ``T.access_ptr``, ``T.import_source`` and the fast-math spellings
``T.__exp``, ``T.__log2`` ...

The fast-math names compute the same function as their precise counterparts here (``T.__exp``
is ``T.exp``); whether the device code uses an approximate instruction is decided by the
``tl.enable_fast_math`` pass config, for the whole kernel."""

from __future__ import annotations

from collections import OrderedDict

from typing import Any

import tvm
from tvm import tirx
from tvm.script import tirx as _T

from ..errors import DSLError, DSLTypeError


def clamp(value: Any, min_val: Any, max_val: Any) -> Any:
    """``value`` limited to ``[min_val, max_val]``: ``min(max(value, min_val), max_val)``."""
    return _T.min(_T.max(value, min_val), max_val)


def infinity(dtype: Any, span: Any = None) -> Any:
    """+inf of the float ``dtype`` (``T.float16`` ... ``T.float8_e5m2``)."""
    from ..utils.dtype import infinity as _infinity

    return _infinity(str(dtype))


ROUND_MODES = {None: "ties-to-even", "ties-to-even": "ties-to-even",
               "half_to_even": "ties-to-even", "ties-away-from-zero": "ties-away-from-zero",
               "half_away_from_zero": "ties-away-from-zero"}


def round(x: Any, mode: str | None = None, span: Any = None) -> Any:  # noqa: A001
    """``x`` rounded to an integral value of its float type: halfway cases to the even
    neighbour (the default, TVM's ``round``) or, with ``mode="ties-away-from-zero"``, away from
    zero.  Floats narrower than 32 bits are rounded in float32 (the result is exact in the
    narrow type), which CUDA's float8 types need."""
    if isinstance(mode, tvm.ir.Span):  # TVMScript's round(x, span)
        mode, span = None, mode
    if mode not in ROUND_MODES:
        raise DSLError(f"T.round: mode must be one of {sorted(m for m in ROUND_MODES if m)}, "
                       f"got {mode!r}")
    x = tirx.convert(x) if not isinstance(x, tvm.ir.Expr) else x
    dtype = str(x.ty)
    wide = tvm.DataType(dtype).bits < 32
    v = tirx.Cast("float32", x) if wide else x
    if ROUND_MODES[mode] == "ties-to-even":
        r = tirx.round(v)
    else:
        t = tirx.trunc(v)
        half = tirx.const(0.5, str(v.ty))
        one = tirx.const(1.0, str(v.ty))
        r = tirx.if_then_else(tirx.abs(v - t) >= half,
                              t + tirx.if_then_else(v < tirx.const(0, str(v.ty)), -one, one), t)
    return tirx.Cast(dtype, r) if wide else r


def cast(value: Any, dtype: Any, span: Any = None) -> Any:
    """``value`` converted to ``dtype``; a dtype that does not exist (``"float17"``) is a
    :class:`DSLError` naming ``T.cast`` (TVM would accept it and fail when building).  A float
    constant converted to an integer type is folded as the GPU converts it (clamped, NaN 0)."""
    from ..transform.cpu_math import gpu_float_to_int
    from ..utils.dtype import canonical_dtype

    target = str(canonical_dtype(dtype, "T.cast"))
    if target.startswith(("int", "uint")) and tvm.DataType(target).lanes == 1 and \
            isinstance(value, (float, tirx.FloatImm)):  # folded as the GPU converts
        if isinstance(value, float):
            value = tirx.const(value, "float32")
        return tirx.const(gpu_float_to_int(value.value, str(value.ty.dtype), target), target)
    return _T.cast(value, target, span)


def pow(x: Any, y: Any, span: Any = None) -> Any:  # noqa: A001
    """``x`` to the power ``y``.  bfloat16 and float8 operands are raised in float32 and the
    result rounded back to ``x``'s type once (TVM's ``pow`` takes float16/32/64 only)."""
    from ..utils.dtype import is_narrow_float

    types = [str(v.dtype) for v in (x, y) if isinstance(v, tirx.PrimExpr)]
    narrow = next((t for t in types if t.startswith("bfloat16") or is_narrow_float(t)), None)
    if narrow is None:
        return _T.pow(x, y)
    lanes = tvm.DataType(narrow).lanes
    wide = "float32" if lanes == 1 else f"float32x{lanes}"
    back = str(x.dtype) if isinstance(x, tirx.PrimExpr) else narrow
    a, b = (tirx.Cast(wide, v) if isinstance(v, tirx.PrimExpr) else tirx.const(v, wide)
            for v in (x, y))
    return tirx.Cast(back, _T.pow(a, b))


def align_up(value: Any, alignment: Any) -> Any:
    """The smallest multiple of ``alignment`` (positive) that is at least ``value``:
    ``ceildiv(value, alignment) * alignment``."""
    return _T.ceildiv(value, alignment) * alignment


def sync_threads(barrier_id: Any = None, arrive_count: Any = None) -> Any:
    """A barrier.  ``T.sync_threads()``: all threads of the block (``__syncthreads()``).
    ``T.sync_threads(barrier_id, arrive_count)``: named barrier ``barrier_id`` (1 to 15) over
    ``arrive_count`` threads (a multiple of 32, default the whole block): each thread that
    reaches it waits until that many threads have, so a subset of the block (the threads of
    an ``if tx < n:``) can synchronize among themselves.  Either may be computed at run time
    (an expression of the program: ``barrier_id = tx // 128 + 1``); constants are checked
    here, a runtime id must lie in 1..15 (or be 0 with the whole block's count)."""
    from ..device import sm80, sync
    from .kernel import _current

    op = "T.sync_threads"
    block = _current(op).num_threads
    if barrier_id is None:
        barrier_id = 0
    bar = _named_barrier(barrier_id, op)
    count = block if arrive_count is None else _thread_count(arrive_count, op, block)
    if isinstance(bar, int) and isinstance(count, int):
        if bar == 0 and count != block:
            raise DSLError(f"{op}(0, {count}): barrier 0 is the whole block's (__syncthreads); "
                           f"give a group of {count} threads an id from 1 to "
                           f"{NAMED_BARRIERS - 1}")
        if bar == 0:
            return sm80.barrier(0, count)
    return sync.sync_partial(bar, count)


def named_barrier_arrive(barrier_id: Any, arrive_count: Any) -> Any:
    """Arrive on named barrier ``barrier_id`` (1 to 15) of ``arrive_count`` threads without
    waiting (``barrier.arrive``): a producer signals the threads that wait with
    ``T.sync_threads(barrier_id, arrive_count)``; the arrivals and the waits together make up
    ``arrive_count``.  The producer's earlier shared-memory writes are visible to the threads
    whose wait this arrival completes.  Either argument may be computed at run time."""
    from ..device import sync
    from .kernel import _current

    op = "T.named_barrier_arrive"
    block = _current(op).num_threads
    bar = _named_barrier(barrier_id, op)
    if isinstance(bar, int) and bar == 0:
        raise DSLError(f"{op}: barrier 0 is the block's __syncthreads barrier; use an id from 1 "
                       f"to {NAMED_BARRIERS - 1}")
    return sync.named_barrier_arrive(bar, _thread_count(arrive_count, op, block))


def sync_grid() -> Any:
    """A barrier of the whole grid (``cooperative_groups::this_grid().sync()``): every thread
    of every block waits until all have reached it, and global-memory writes before it are
    visible to every thread after it.  The kernel is then launched cooperatively, which needs
    all its blocks resident on the GPU at once (the launch fails otherwise: keep the grid at
    most the number of blocks the GPU holds).  CUDA only."""
    from ..device import sync
    from .kernel import _current

    _current("T.sync_grid")
    return sync.grid_sync()


NAMED_BARRIERS = 16  # PTX barrier ids 0..15
WARP = 32


def _named_barrier(value: Any, op: str) -> Any:
    """A barrier id: a checked Python int, or an int32 expression evaluated at run time."""
    if isinstance(value, tirx.IntImm):
        value = int(value.value)
    if isinstance(value, tirx.PrimExpr):
        return _int32(value, op, "barrier_id")
    bar = _constant(value, op, "barrier_id", 0)
    if bar >= NAMED_BARRIERS:
        raise DSLError(f"{op}: barrier_id {bar} is out of range; PTX has named barriers 0 to "
                       f"{NAMED_BARRIERS - 1}")
    return bar


def _thread_count(value: Any, op: str, block: int) -> Any:
    """A barrier's thread count: a checked Python int (whole warps, at most the block), or an
    int32 expression evaluated at run time."""
    if isinstance(value, tirx.IntImm):
        value = int(value.value)
    if isinstance(value, tirx.PrimExpr):
        return _int32(value, op, "arrive_count")
    count = _constant(value, op, "arrive_count", 1)
    if count % WARP or count > block:
        raise DSLError(f"{op}: arrive_count {count} must be a multiple of {WARP} (whole warps) "
                       f"and at most the block's {block} threads")
    return count


def _int32(value: Any, op: str, what: str) -> Any:
    dtype = str(value.dtype)
    if not dtype.startswith(("int", "uint")):
        raise DSLTypeError(f"{op}: {what} must be an integer, got a {dtype} expression")
    return value if dtype == "int32" else tirx.Cast("int32", value)


def _constant(value: Any, op: str, what: str, low: int) -> int:
    if isinstance(value, tirx.IntImm):
        value = int(value.value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DSLTypeError(f"{op}: {what} must be a Python int or an integer expression, "
                           f"got {value!r}")
    if value < low:
        raise DSLError(f"{op}: {what} must be at least {low}, got {value}")
    return value


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
    ptr = buf.access_ptr(access_type, offset=start + offset, extent=count)
    if R.is_element(base) or R.is_region(base):
        _note_origin(ptr, buf, R.mins(R.region_of(base, "T.access_ptr", "base")), offset)
    return ptr


_ORIGINS: "OrderedDict[int, tuple]" = OrderedDict()


def _note_origin(ptr: Any, buf: Any, mins: list, offset: Any) -> None:
    """Remember the element a pointer of ``T.access_ptr`` was taken from (the flat offset
    loses it), for ops that address tiles element-wise (``T.ptx_cp_async``).  The pointer is
    kept alive with its entry, so its handle is not reused while the entry exists."""
    _ORIGINS[ptr.__chandle__()] = (ptr, buf, list(mins), offset)
    while len(_ORIGINS) > 4096:
        _ORIGINS.popitem(last=False)


def access_origin(ptr: Any) -> tuple | None:
    """``(buffer, indices, extra offset)`` of a pointer made by ``T.access_ptr`` from an
    element or a slice, else ``None``."""
    hit = _ORIGINS.get(ptr.__chandle__()) if hasattr(ptr, "__chandle__") else None
    return None if hit is None or not hit[0].same_as(ptr) else hit[1:]


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
    top of the kernel's generated device code, wherever in the kernel it is called (a loop, a
    macro).  CUDA targets only: the CPU backend compiles
    no C++, so a kernel calling into the imported code cannot run there."""
    from .kernel import _current

    if not isinstance(source, str):
        raise DSLError(f"T.import_source: source must be a str, got {type(source).__name__}")
    _current("T.import_source")
    # A statement of its own (the source rides on an attribute over a no-op), so that a call
    # inside a loop or a macro leaves the enclosing frames nested as written.
    with _T.attr(0, "tl.prelude", source):
        _T.evaluate(0)


def dp4a(A: Any, B: Any, C: Any) -> None:
    """``C += A[0] * B[0] + A[1] * B[1] + A[2] * B[2] + A[3] * B[3]`` (CUDA's ``__dp4a``): four
    consecutive signed ``int8`` elements of ``A`` and of ``B`` (each a buffer, a slice or an
    element: the four start there, along the last dimension) dotted in ``int32`` and added to
    the ``int32`` element ``C`` (a buffer's first element, a slice's or an element).  Other
    dtypes raise :class:`DSLTypeError` (a ``ValueError``)."""
    from ..ops import region as R

    starts = []
    for role, x in (("A", A), ("B", B), ("C", C)):
        try:
            reg = R.region_of(x, "T.dp4a", role)
        except Exception:
            raise DSLTypeError(f"T.dp4a: {role} must be a buffer, a slice or an element of a "
                               f"buffer, got {x!r}") from None
        starts.append((R.buffer_of(reg), [r.min for r in reg.region]))
    dtypes = [str(buf.dtype) for buf, _ in starts]
    if dtypes[0] != "int8" or dtypes[1] != "int8" or dtypes[2] != "int32":
        raise DSLTypeError(
            f"T.dp4a requires signed int8 inputs A and B and an int32 accumulator C "
            f"(A += int8 x int8 -> int32), got A {dtypes[0]}, B {dtypes[1]}, C {dtypes[2]}")
    (a, ia), (b, ib), (c, ic) = starts

    def lane(buf, idx, k):
        return _T.Cast("int32", tirx.BufferLoad(buf, idx[:-1] + [idx[-1] + k]))

    total = tirx.BufferLoad(c, ic)
    for k in range(4):
        total = total + lane(a, ia, k) * lane(b, ib, k)
    _T.buffer_store(c, total, ic)


def _same_as(fn, name: str, doc: str | None = None):
    """``fn`` of a floating-point value (a Python number is a float32 constant); any other
    type is a :class:`DSLTypeError` naming ``T.<name>`` (TVM would build an integer call that
    no backend lowers)."""
    def intrinsic(x: Any) -> Any:
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            x = tirx.const(float(x), "float32")
        dtype = str(getattr(x, "dtype", "float32"))
        if not dtype.startswith(("float16", "bfloat16", "float32", "float64")):
            raise DSLTypeError(f"T.{name} only supports floating-point inputs, but got {dtype}"
                               f" (convert it first: T.{name}(T.cast(x, \"float32\")))")
        return fn(x)

    intrinsic.__name__ = name
    intrinsic.__doc__ = doc or \
        f"``T.{name}(x)``: the same function as ``{fn.__name__}`` (see module doc)."
    return intrinsic


FAST_MATH = {
    "__exp": _T.exp, "__exp2": _T.exp2, "__exp10": _T.exp10, "__log": _T.log,
    "__log2": _T.log2, "__log10": _T.log10, "__sin": _T.sin, "__cos": _T.cos,
    "__tan": _T.tan, "__sqrt": _T.sqrt, "__rsqrt": _T.rsqrt,
}
globals().update({name: _same_as(fn, name) for name, fn in FAST_MATH.items()})
# TVMScript's float functions, refusing other types by name
FLOAT_MATH = ("exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin",
              "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh",
              "atanh", "erf", "sigmoid")
globals().update({name: _same_as(getattr(_T, name), name, getattr(_T, name).__doc__)
                  for name in FLOAT_MATH})

def _classifier(name: str):
    fn = getattr(_T, name)

    def classify(x: Any, span: Any = None) -> Any:
        dtype = str(getattr(x, "dtype", ""))
        if dtype.startswith(("bfloat16", "float8")):  # TVM refuses them; float32 is exact
            _, _, lanes = dtype.partition("x")
            x = tirx.Cast("float32" + (f"x{lanes}" if lanes else ""), x)
        return fn(x, span)

    classify.__name__ = name
    classify.__doc__ = f"``T.{name}(x)`` of a float value; bfloat16 and float8 in float32."
    return classify


CLASSIFIERS = ("isnan", "isinf", "isfinite")
globals().update({name: _classifier(name) for name in CLASSIFIERS})

__all__ = ["access_ptr", "align_up", "call_extern", "cast", "clamp", "dp4a", "import_source",
           "infinity", "pow", "round", "named_barrier_arrive", "sync_grid", "sync_threads",
           *FAST_MATH, *FLOAT_MATH, *CLASSIFIERS]
