"""``T.any_of`` / ``T.all_of``: whether any / every element of a (small) region is true.

The region is a buffer, a slice (``mask[by, bx, k, :]``) or an element, of any memory; its
extents must be constants.  The result is an ordinary boolean expression over the elements
(``m[0] or m[1] or ...``; a non-boolean element counts as true when non-zero), so it means
the same on every target and can be a kernel-wide ``if`` condition.
"""

from __future__ import annotations

import itertools
from typing import Any

from tvm import tirx

from ..errors import DSLError
from ..ops import region as R

MAX_ELEMENTS = 1024  # one term per element: a condition, not a reduction of a large tile


def _truths(region_like: Any, op: str) -> list:
    region = R.region_of(region_like, op, "the region")
    exts = [R.as_int(e) for e in R.extents(region)]
    if any(e is None for e in exts):
        raise DSLError(f"{op}: the region {R.describe(region)} must have constant extents")
    count = 1
    for e in exts:
        count *= e
    if count > MAX_ELEMENTS:
        raise DSLError(f"{op}: the region {R.describe(region)} has {count} elements; at most "
                       f"{MAX_ELEMENTS} (reduce a large tile with T.reduce_* first)")
    buf, mins = region.source, R.mins(region)
    out = []
    for offs in itertools.product(*(range(e) for e in exts)):
        x = tirx.BufferLoad(buf, [m + o for m, o in zip(mins, offs)])
        out.append(x if buf.dtype.is_bool else tirx.NE(x, tirx.const(0, str(buf.dtype))))
    return out


def any_of(region: Any) -> Any:
    """True when any element of ``region`` is true (non-zero)."""
    terms = _truths(region, "T.any_of")
    out = terms[0]
    for t in terms[1:]:
        out = tirx.Or(out, t)
    return out


def all_of(region: Any) -> Any:
    """True when every element of ``region`` is true (non-zero)."""
    terms = _truths(region, "T.all_of")
    out = terms[0]
    for t in terms[1:]:
        out = tirx.And(out, t)
    return out


__all__ = ["all_of", "any_of"]
