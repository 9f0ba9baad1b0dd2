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


def views_of_tiles(func: tirx.PrimFunc) -> list[tuple[Any, Any]]:
    """(view, tile) for each ``T.view`` / ``T.reshape`` of a shared tile or a fragment in
    ``func``."""
    found: list = []

    def on_decl(s):
        data = s.data
        base = data.args[0] if isinstance(data, tvm.ir.Call) and len(data.args) == 1 else None
        if base is not None and hasattr(base, "scope") and base.scope() in TILE_SCOPES:
            found.append((s.buffer, base))

    import tvm_ffi

    tvm_ffi.structural_walk(func.body, (tirx.DeclBuffer, on_decl))
    return found


def _check_tile_views(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Refuse, on CUDA, views of shared tiles and fragments: the CUDA passes place and lay
    out each tile by itself, so a second buffer over its memory would not follow it."""
    from ..engine.target import is_cpu
    from ..errors import LoweringError
    from ..transform.passes import target_of

    if is_cpu(target_of(func)):
        return func
    for v, tile in views_of_tiles(func):
        raise LoweringError(f"{v.name} is a T.view/T.reshape of the {tile.scope()} tile "
                            f"{tile.name}; on CUDA only views of tensors and per-thread "
                            f"(T.alloc_local) buffers are supported so far")
    return func


def CheckTileViews():  # noqa: N802  (a pass factory, named like the others)
    """The pass of :func:`_check_tile_views`."""
    from ..transform.passes import function_pass

    return function_pass("tl.CheckTileViews")(_check_tile_views)()
