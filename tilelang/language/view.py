"""``T.reshape`` and ``T.view``: another buffer over the same memory as ``src``, with another
shape (and for ``T.view``, optionally another element type).  Writes through one are seen
through the other; nothing is copied."""

from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm import tirx

from ..errors import DSLError
from ..utils.dtype import canonical_dtype


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
        raise DSLError(
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


def _check_tile_views(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """On CUDA, a view of a fragment shares the fragment's registers, so it must keep the
    element size (a view that changes it is refused); views of shared tiles are refused
    (the CUDA passes place and lay out each shared tile by itself, so a second buffer over
    its memory would not follow it)."""
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
        raise LoweringError(f"{v.name} is a T.view/T.reshape of the {tile.scope()} tile "
                            f"{tile.name}; on CUDA only views of tensors, fragments and "
                            "per-thread (T.alloc_local) buffers are supported so far")
    return func


def CheckTileViews():  # noqa: N802  (a pass factory, named like the others)
    """The pass of :func:`_check_tile_views`."""
    from ..transform.passes import function_pass

    return function_pass("tl.CheckTileViews")(_check_tile_views)()
