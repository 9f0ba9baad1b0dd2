"""Regions: the rectangular parts of buffers that tile operators read and write.

A tile operator's buffer argument is stored in the IR as a ``TensorRegion`` (buffer plus one
``Range`` per dimension).  Users write a buffer (the whole of it), a slice
(``A[i*64:(i+1)*64, :]``) or an element index (``A[by*64, k*32]``); the element form means the
region of the other operand's shape that starts there.
"""

from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm import tirx
from tvm.sym import Analyzer
from tvm.ir import Range
from tvm.tirx.buffer import is_buffer_var

from ..errors import TileOpError

_analyzer = Analyzer()


def is_buffer(x: Any) -> bool:
    return is_buffer_var(x)


def is_region(x: Any) -> bool:
    return isinstance(x, tvm.ir.TensorRegion)


def is_element(x: Any) -> bool:
    return isinstance(x, tvm.ir.TensorLoad)


def full_region(buf) -> tvm.ir.TensorRegion:
    return tirx.BufferRegion(buf, [Range.from_min_extent(0, s) for s in buf.shape])


def region_of(x: Any, op: str, role: str, like_shape: Sequence | None = None) -> tvm.ir.TensorRegion:
    """Convert a user argument into a ``TensorRegion``.

    ``like_shape`` gives the extents used when ``x`` is an element index (the other operand's
    shape, see :func:`fit_extents`).
    """
    x = getattr(x, "scalar", x)  # T.alloc_var wrapper
    if is_buffer(x):
        return full_region(x)
    if is_region(x):
        return simplified(python_slice(x, op, role))
    if is_element(x):
        buf = x.source
        idx = list(x.indices)
        if like_shape is None:
            return tirx.BufferRegion(buf, [Range.from_min_extent(i, 1) for i in idx])
        ext = fit_extents(like_shape, len(idx))
        if ext is None:
            raise TileOpError(
                f"{op}: {role} {x} indexes {len(idx)} dims but the other operand has shape "
                f"{fmt_shape(like_shape)}"
            )
        return tirx.BufferRegion(buf, [Range.from_min_extent(i, e) for i, e in zip(idx, ext)])
    raise TileOpError(f"{op}: {role} must be a buffer, a slice or an element of a buffer, got {x!r}")


def python_slice(region: tvm.ir.TensorRegion, op: str, role: str) -> tvm.ir.TensorRegion:
    """A slice whose start is a negative constant and whose stop is not negative counts its
    start from the end, as in Python: ``A[-4:]`` (the parser made its stop the dimension's
    extent) and ``A[-4:n]`` are the last four elements.  A stop below zero too
    (``A[-4:-1]``) moves with the start (``LegalizeNegativeIndex``)."""
    ranges, changed = [], False
    for d, (r, n) in enumerate(zip(region.region, region.source.shape)):
        if isinstance(r.min, tirx.IntImm) and r.min.value < 0:
            stop = _analyzer.simplify(r.min + r.extent)
            with _analyzer.constraint_scope(n >= 0):  # a size variable is not negative
                from_start = _analyzer.can_prove(stop >= 0)
            if from_start:
                lo = _analyzer.simplify(r.min + n)
                ext = _analyzer.simplify(stop - lo)
                if _analyzer.can_prove(ext <= 0):
                    raise TileOpError(f"{op}: {role} {region} is empty in dimension {d}: "
                                      f"it starts at {lo} (from the end) and stops at {stop}")
                r, changed = Range.from_min_extent(lo, ext), True
        ranges.append(r)
    return tirx.BufferRegion(region.source, ranges) if changed else region


def fit_extents(shape: Sequence, ndim: int) -> list | None:
    """The extents, over ``ndim`` buffer dims, of the region an element index stands for when
    the other operand has ``shape``: dimension by dimension when the ranks agree; aligned with
    the trailing dims (leading extents 1) when ``shape`` has fewer dims; with unit dims of
    ``shape`` dropped, leading ones first, when it has more.  ``None`` when it cannot fit."""
    ext = list(shape)
    drop = len(ext) - ndim
    if drop > 0:
        units = [k for k, e in enumerate(ext) if as_int(e) == 1][:drop]
        if len(units) < drop:
            return None
        ext = [e for k, e in enumerate(ext) if k not in units]
    return [1] * (ndim - len(ext)) + ext


def simplified(region: tvm.ir.TensorRegion) -> tvm.ir.TensorRegion:
    """``region`` with every extent simplified, and made a constant wherever it provably is
    one: ``A[h0:h1]`` with ``h1 = h0 + 64`` spans 64 elements.  An extent written with kernel
    scalars is read through their defining values (relying on each being assigned once, which
    the parser checks, see :class:`ScalarBindings`)."""
    ranges, changed = [], False
    for r in region.region:
        ext = constant_extent(r.extent)
        changed |= not ext.same_as(r.extent)
        ranges.append(Range.from_min_extent(r.min, ext) if not ext.same_as(r.extent) else r)
    return tirx.BufferRegion(region.source, ranges) if changed else region


def constant_extent(e):
    """``e`` simplified; an ``IntImm`` when it is provably constant, also through the defining
    values of the kernel scalars it reads."""
    s = _analyzer.simplify(e)
    if isinstance(s, tirx.IntImm) or not _bindings:
        return s
    used: dict = {}
    s2 = _analyzer.simplify(_substitute_bindings(s, used))
    if used and isinstance(s2, tirx.IntImm):
        for k, buf in used.items():
            _bindings[-1].relied.setdefault(k, (buf, f"{e} == {s2}"))
        return s2
    return s


def buffer_of(region: tvm.ir.TensorRegion):
    return region.source


def extents(region: tvm.ir.TensorRegion) -> list:
    return [_analyzer.simplify(r.extent) for r in region.region]


def mins(region: tvm.ir.TensorRegion) -> list:
    return [r.min for r in region.region]


def squeeze(shape: Sequence) -> list:
    """The shape without its unit dimensions."""
    return [s for s in shape if not (isinstance(s, (int, tirx.IntImm)) and int(s) == 1)]


def as_int(x) -> int | None:
    if isinstance(x, int):
        return x
    if isinstance(x, tirx.IntImm):
        return int(x.value)
    return None


class ScalarBindings:
    """The values of the kernel scalars the program being parsed defined by ``x = expr``
    (TVMScript makes each a one-element local buffer).  A shape check may read a scalar as its
    defining value (``kv_end - kv_start`` is the tile size); that holds only if the scalar is
    never assigned again, which the parser verifies once the whole body is known
    (:func:`check_bindings`)."""

    def __init__(self):
        self.values: dict = {}  # buffer handle -> (buffer, defining value)
        self.relied: dict = {}  # buffer handle -> (buffer, what relied on it)


_bindings: list[ScalarBindings] = []


def record_binding(buf, value) -> None:
    if _bindings:
        _bindings[-1].values[buf.__chandle__()] = (buf, value)


def _substitute_bindings(e, used: dict):
    """``e`` with loads of bound scalars replaced by their defining values (transitively)."""
    if not _bindings:
        return e
    values = _bindings[-1].values

    def load(x):
        hit = values.get(x.source.__chandle__())
        if hit is None:
            return None
        used[x.source.__chandle__()] = hit[0]
        return _substitute_bindings(hit[1], used)

    from ..ir_utils import map_nodes

    def on_load(x):
        v = load(x)
        return x if v is None else v

    return map_nodes(e, (tvm.ir.TensorLoad, on_load))


def same_extent(a, b) -> bool:
    if as_int(a) is not None and as_int(b) is not None:
        return as_int(a) == as_int(b)
    if _analyzer.can_prove_equal(a, b):
        return True
    used: dict = {}
    a2, b2 = _substitute_bindings(a, used), _substitute_bindings(b, used)
    if used and _analyzer.can_prove_equal(a2, b2):
        for k, buf in used.items():
            _bindings[-1].relied.setdefault(k, (buf, f"{a} == {b}"))
        return True
    return False


def same_shape(a: Sequence, b: Sequence) -> bool:
    return len(a) == len(b) and all(same_extent(x, y) for x, y in zip(a, b))


def fmt_shape(shape: Sequence) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def describe(region: tvm.ir.TensorRegion) -> str:
    """``A[0:64, k*32:k*32+32]`` for messages; the whole buffer is just its name."""
    buf = region.source
    whole = all(
        as_int(r.min) == 0 and same_extent(r.extent, s) for r, s in zip(region.region, buf.shape)
    )
    if whole:
        return buf.name
    parts = []
    for r in region.region:
        lo = _analyzer.simplify(r.min)
        hi = _analyzer.simplify(r.min + r.extent)
        parts.append(str(lo) if as_int(r.extent) == 1 else f"{lo}:{hi}")
    return f"{buf.name}[{', '.join(parts)}]"


def scope_of(region_or_buffer) -> str:
    buf = region_or_buffer.source if is_region(region_or_buffer) else region_or_buffer
    return buf.scope()
