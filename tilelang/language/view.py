"""``T.reshape`` and ``T.view``: another buffer over the same memory as ``src``, with another
shape (and for ``T.view``, optionally another element type).  Writes through one are seen
through the other; nothing is copied."""

from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm import tirx

from ..errors import DSLError
from ..utils.dtype import canonical_dtype


class ViewSizeError(DSLError, AssertionError):
    """A view whose size differs from its buffer's (the public API raises an AssertionError)."""


def _static_count(shape: Sequence) -> int | None:
    n = 1
    for s in shape:
        if isinstance(s, tirx.IntImm):
            s = int(s.value)
        if not isinstance(s, int):
            return None
        n *= s
    return n


def _shape(shape: Any, op: str, src: Any) -> list:
    dims = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    if not dims:
        raise DSLError(f"{op}({src.name}, ...): the shape needs at least one dimension")
    for d in dims:
        if isinstance(d, int) and d <= 0:
            raise DSLError(f"{op}({src.name}, {tuple(dims)}): every dimension must be positive")
    return dims


def reshape(src: Any, shape: Any) -> Any:
    """``src`` (a tensor, tile, fragment or local buffer) seen with ``shape``: the same elements
    in the same row-major order; the element counts must agree."""
    return view(src, shape, op="T.reshape")


def view(src: Any, shape: Any = None, dtype: Any = None, op: str = "T.view") -> Any:
    """``src`` seen with another ``shape`` and/or element type ``dtype``: the same bytes, in
    row-major order.  Without ``shape``, a new ``dtype`` rescales the last dimension (a
    ``(4, 8)`` float32 tile viewed as float16 is ``(4, 16)``); with both, the total size in
    bits must agree."""
    if not (isinstance(src, tvm.ir.Var) and hasattr(src, "scope")):
        raise DSLError(f"{op}: expected a buffer (a tensor parameter or an allocation), got "
                       f"{src!r}")
    old = canonical_dtype(src.dtype, op)
    new = old if dtype is None else canonical_dtype(dtype, op)
    if shape is None:
        dims = list(src.shape)
        if new.bits != old.bits:
            last = dims[-1]
            if isinstance(last, tirx.IntImm):
                last = int(last.value)
            if not isinstance(last, int) or (last * old.bits) % new.bits:
                raise DSLError(f"{op}({src.name}, dtype={new}): the last dimension {last} of "
                               f"{old} does not hold a whole number of {new} elements")
            dims[-1] = last * old.bits // new.bits
    else:
        dims = _shape(shape, op, src)
    have, want = _static_count(src.shape), _static_count(dims)
    if have is not None and want is not None and have * old.bits != want * new.bits:
        what = "elements" if new.bits == old.bits else "bits"
        scale = 1 if new.bits == old.bits else None
        raise ViewSizeError(
            f"{op}({src.name}, {tuple(dims)}{'' if dtype is None else f', {new}'}): "
            f"{src.name} has shape {tuple(int(s) for s in src.shape)} of {old} "
            f"({have * (scale or old.bits)} {what}), the view "
            f"{want * (scale or new.bits)} {what}; they must be equal")
    out = src.view(new) if new != old else src
    if [str(d) for d in out.shape] != [str(d) for d in dims]:
        out = out.view(*dims)
    return out


TILE_SCOPES = ("shared", "shared.dyn", "local.fragment")


def viewed_buffer(decl: tirx.DeclBuffer) -> Any:
    """The buffer a ``DeclBuffer`` is a ``T.view`` / ``T.reshape`` of, or ``None``."""
    data = decl.data
    if isinstance(data, tvm.ir.Call) and len(data.args) == 1 and hasattr(data.args[0], "scope"):
        return data.args[0]
    return None


def view_roots(body: Any, scopes: tuple = ("global",)) -> dict:
    """The handle of each ``T.view`` / ``T.reshape`` in ``body`` of a buffer in ``scopes`` ->
    the handle of the buffer whose bytes it finally is (views of views followed); tensors
    declared over the same address variable (two ``T.make_tensor`` of one ``T.ptr``) are
    views of the first."""
    import tvm_ffi

    over: dict = {}
    first: dict = {}  # address variable -> the first tensor declared over it

    def on_decl(s):
        base = viewed_buffer(s)
        if base is not None and base.scope() in scopes:
            over[s.buffer.__chandle__()] = base.__chandle__()
        elif isinstance(s.data, tvm.ir.Var) and s.buffer.scope() in scopes:
            k = first.setdefault(s.data.__chandle__(), s.buffer.__chandle__())
            if k != s.buffer.__chandle__():
                over[s.buffer.__chandle__()] = k

    tvm_ffi.structural_walk(body, (tirx.DeclBuffer, on_decl))
    out = {}
    for k in over:
        root, seen = k, set()
        while root in over and root not in seen:
            seen.add(root)
            root = over[root]
        out[k] = root
    return out


def views_of_tiles(func_or_body: Any) -> list[tuple[Any, Any]]:
    """(view, tile) for each ``T.view`` / ``T.reshape`` of a shared tile or a fragment in
    ``func_or_body``, in program order."""
    import tvm_ffi

    found: list = []

    def on_decl(s):
        base = viewed_buffer(s)
        if base is not None and base.scope() in TILE_SCOPES:
            found.append((s.buffer, base))

    body = func_or_body.body if isinstance(func_or_body, tirx.PrimFunc) else func_or_body
    tvm_ffi.structural_walk(body, (tirx.DeclBuffer, on_decl))
    return found


def reshaped_layout(layout: Any, src: Any, dst: Any, why: str = "") -> Any:
    """The ``Fragment`` of ``dst`` that keeps every element of ``src`` (laid out by
    ``layout``) in its thread and register, where one of the two is a ``T.view`` /
    ``T.reshape`` of the other (the same elements in row-major order).  ``LoweringError``
    when the layout's digits cannot be regrouped into ``dst``'s dims."""
    from ..errors import LoweringError

    out = layout.reshaped([int(s) for s in dst.shape])
    if out is None:
        raise LoweringError(
            f"{dst.name} {tuple(int(s) for s in dst.shape)} and {src.name} "
            f"{tuple(int(s) for s in src.shape)} are views of the same fragment, but the "
            f"layout of {src.name} ({layout}{', from ' + why if why else ''}) spreads its "
            f"elements so that the dims of {dst.name} would not keep each element in its "
            "thread and register (a view's dims must fall on the layout's digits: a padded "
            "or unevenly split dim cannot be regrouped); reshape along dims laid out evenly, "
            "or copy the data into a fragment of the other shape")
    return out


def _dims(buf) -> list[int]:
    return [int(s) for s in buf.shape]


def _linear(idx, shape):
    off = 0
    for i, s in zip(idx, shape):
        off = off * s + i
    return off


def _div(a, b):
    return a // b if isinstance(a, int) else tirx.floordiv(a, b)


def _mod(a, b):
    return a % b if isinstance(a, int) else tirx.floormod(a, b)


def _unravel(v, shape) -> list:
    """The row-major index of ``v`` in ``shape`` (the first dim is not wrapped: ``v`` is in
    range)."""
    out = []
    for s in reversed(shape[1:]):
        out.append(_mod(v, s) if s != 1 else 0)
        v = _div(v, s) if s != 1 else v
    return ([v] + list(reversed(out))) if shape else []


def _regroup(idx, dst_shape, dst_bits, src_shape, src_bits):
    """The element of ``src`` holding the first bit of element ``idx`` of ``dst`` (both
    row-major over the same bits), and the offset of ``dst``'s element in it, in ``dst``
    elements (0 unless ``dst`` is narrower).  Dims are matched group by group, a group
    ending where both shapes have a dim boundary at the same bit, so that the index of a
    plain reshape stays a per-dim expression."""
    def strides(shape, bits):  # bits below each dim boundary, outermost first
        out, acc = [], bits
        for s in reversed(shape):
            out.append(acc)
            acc *= s
        return [acc] + list(reversed(out))  # len(shape) + 1 boundaries

    bd, bs = strides(dst_shape, dst_bits), strides(src_shape, src_bits)
    common = sorted(set(bd) & set(bs), reverse=True)
    out, i, j = [], 0, 0
    for lo in common[1:]:
        i2, j2 = bd.index(lo), bs.index(lo)
        v = _linear(idx[i:i2], dst_shape[i:i2])
        out += _unravel(v, src_shape[j:j2])
        i, j = i2, j2
    # the dims below the last common boundary: the element sizes differ here
    w = _linear(idx[i:], dst_shape[i:])
    if dst_bits <= src_bits:
        r = src_bits // dst_bits
        out += _unravel(_div(w, r) if r > 1 else w, src_shape[j:])
        return out, (_mod(w, r) if r > 1 else 0)
    out += _unravel(w * (dst_bits // src_bits), src_shape[j:])
    return out, 0


def _row_major_offsets(layout, shape) -> Any:
    """The stored element offset of each element of a tile of ``shape`` laid out by
    ``layout``, in row-major order of the logical index (numpy), or ``None``."""
    import numpy as np

    table = layout.table()
    if table is None:
        return None
    _, stored = table
    oshape = [int(x) for x in layout.output_shape]
    off = np.zeros(stored.shape[0], dtype=np.int64)
    for d, s in enumerate(oshape):
        off = off * s + stored[:, d]
    return off


def shared_view_layout(layout: Any, src: Any, dst: Any) -> Any:
    """The layout of shared buffer ``dst`` where ``src`` and ``dst`` are views of the same
    bytes (one a ``T.view`` / ``T.reshape`` of the other, in row-major order) and ``src`` is
    stored by ``layout`` (``None``: row-major): each element of ``dst`` is stored on the bytes
    its bytes have in ``src``.  ``None`` when that is row-major.  A swizzle whose rows keep
    their bytes gives the swizzle of ``dst``'s rows (same panels in bytes).  ``LoweringError``
    when an element of ``dst`` wider than ``src``'s would span bytes that ``layout`` does not
    keep together and in order."""
    import numpy as np

    from ..errors import LoweringError
    from ..layout.layout import Layout
    from ..layout.swizzle import SwizzledLayout, can_swizzle

    if layout is None:
        return None
    ds, ss = _dims(dst), _dims(src)
    db, sb = tvm.DataType(dst.dtype).bits, tvm.DataType(src.dtype).bits
    if isinstance(layout, SwizzledLayout) and ds[:-1] == ss[:-1] and db <= 128 and \
            128 % db == 0 and (layout.panel * sb) % db == 0:
        panel = layout.panel * sb // db
        if ds[-1] % panel == 0 and can_swizzle(panel, str(dst.dtype)):
            return SwizzledLayout(ds, str(dst.dtype), panel)  # the same chunks, moved alike
    offsets = _row_major_offsets(layout, ss)
    if offsets is not None and np.array_equal(offsets, np.arange(offsets.size)):
        return None  # row-major after all
    if db > sb:
        r = db // sb
        ok = offsets is not None
        if ok:
            groups = offsets.reshape(-1, r)
            ok = bool(np.all(groups == groups[:, :1] + np.arange(r)) and
                      np.all(groups[:, 0] % r == 0))
        if not ok:
            raise LoweringError(
                f"{dst.name} {tuple(ds)} {dst.dtype} and {src.name} {tuple(ss)} {src.dtype} "
                f"are views of the same shared bytes, but the layout of {src.name} ({layout}) "
                f"does not keep the {r} {src.dtype} elements under each {dst.dtype} element "
                "together and in order (a swizzle moves whole 16-byte chunks; a custom layout "
                "must store each such group contiguously, aligned to its size); lay the tile "
                f"out in row-major or swizzled order, or view it as {src.dtype}")
    oshape = [int(x) for x in layout.output_shape]

    def fn(*idx):
        sidx, sub = _regroup(list(idx), ds, db, ss, sb)
        off = _linear(layout.map(*sidx), oshape)
        if db <= sb:
            return [off * (sb // db) + sub]
        return [tirx.floordiv(off, db // sb)]

    return _as_swizzle(Layout(ds, fn), dst)


def _as_swizzle(layout: Any, buf: Any) -> Any:
    """``layout`` of shared buffer ``buf``, or the swizzle of ``buf`` (sm80 or TMA/GMMA)
    that stores every element alike, so that TMA, wgmma and the planner's alignment see it as
    one."""
    import numpy as np

    from ..layout.swizzle import GMMA_SWIZZLES, make_gmma_swizzled_layout, make_swizzled_layout

    shape = _dims(buf)
    if len(shape) < 2:
        return layout
    candidates = [make_swizzled_layout(buf)]
    for sbytes in GMMA_SWIZZLES:
        try:
            candidates.append(make_gmma_swizzled_layout(shape, str(buf.dtype), sbytes))
        except ValueError:
            continue
    have = _row_major_offsets(layout, shape)
    for c in candidates:
        if getattr(c, "swizzled", False) and have is not None and \
                np.array_equal(have, _row_major_offsets(c, shape)):
            return c
    return layout


def _check_tile_views(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """On CUDA, a view of a fragment shares the fragment's registers, so it must keep the
    element size (a view that changes it is refused); a view of a shared tile is the tile's
    bytes (laid out through the tile's layout by LayoutInference and PlanSharedMemory), so
    both need constant shapes."""
    from ..engine.target import is_cpu
    from ..errors import LoweringError
    from ..transform.passes import target_of

    if is_cpu(target_of(func)):
        return func
    for v, tile in views_of_tiles(func):
        if tile.scope() == "local.fragment":
            old, new = tvm.DataType(tile.dtype), tvm.DataType(v.dtype)
            if old.bits * old.lanes == new.bits * new.lanes:
                continue
            raise LoweringError(
                f"{v.name} is a T.view of the fragment {tile.name} as {v.dtype} (from "
                f"{tile.dtype}); on CUDA a fragment's view shares its registers one element "
                "each, so it must keep the element size (view a shared or local copy instead)")
        for b in (tile, v):
            if not all(isinstance(x, tirx.IntImm) for x in b.shape):
                raise LoweringError(
                    f"{v.name} is a T.view/T.reshape of the shared tile {tile.name}, and "
                    f"{b.name} has shape {list(b.shape)}; on CUDA shared tiles and their views "
                    "need constant shapes")
    return func


def CheckTileViews():  # noqa: N802  (a pass factory, named like the others)
    """The pass of :func:`_check_tile_views`."""
    from ..transform.passes import function_pass

    return function_pass("tl.CheckTileViews")(_check_tile_views)()
