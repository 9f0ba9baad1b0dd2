"""``LegalizeNegativeIndex``: a negative index counts from the end of its dimension, as in
Python (``A[-1]`` is the last element of ``A``).

Every load and store of the user's program, and every region a tile operator is given, is
looked at before layout inference (after ``ScalarBindings``, so ``j = i - 4; A[j]`` is
``A[i - 4]``).  A scalar index the analyzer proves negative (under the loop ranges, thread
extents and bindings) gets the dimension's extent added (``A[-i - 1]`` over ``i < 4`` becomes
``A[n - 1 - i]``); one of unknown sign is left as written (the bounds guards of the backends
deal with it).  A vector index (``T.Ramp`` / ``T.Broadcast``) is judged lane by lane: proven
non-negative lanes stay, proven negative lanes are shifted, and lanes of unknown sign become
``lane < 0 ? lane + n : lane``.  Such an index is no longer one contiguous run, so the access
is done lane by lane (``A[T.Ramp(t - 2, 1, 4)]`` touches ``A[n - 2], A[n - 1], A[0], A[1]`` at
``t = 0``).  A region (``T.copy(A[-4], F)``, ``T.atomic_add(H[-1], x)``) starts where its
first element would: a start proven negative gets the extent added, the extent is kept.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from .passes import function_pass

LOAD = tvm.ir.TensorLoad  # what ``tirx.BufferLoad(...)`` builds


def _bind_scopes(body, az: Analyzer) -> None:
    """Tell ``az`` the range of every loop and thread variable and the value of every
    binding below ``body`` (each variable is defined once, so the facts hold wherever it is
    visible)."""

    def on_for(f):
        az.bind(f.loop_var, tvm.ir.Range.from_min_extent(f.min, f.extent), allow_override=True)

    def on_attr(a):
        if a.attr_key in ("thread_extent", "virtual_thread"):
            var = a.node.var if hasattr(a.node, "var") else a.node
            if isinstance(var, tvm.ir.Var):
                az.bind(var, tvm.ir.Range.from_min_extent(tirx.const(0, str(var.ty)), a.value),
                        allow_override=True)

    def on_let(s):
        if str(s.var.ty).startswith(("int", "uint")):
            az.bind(s.var, s.value, allow_override=True)

    tvm_ffi.structural_walk(body, [(tirx.For, on_for), (tirx.AttrStmt, on_attr),
                                   (tirx.LetStmt, on_let), (tirx.Bind, on_let)])


def _as(extent, like):
    """``extent`` in the integer type of ``like``."""
    return extent if str(extent.ty) == str(like.ty) else tirx.Cast(str(like.ty), extent)


class _Legalizer:
    def __init__(self, az: Analyzer):
        self.az = az

    def sign(self, i) -> str:
        """``"+"`` (proven >= 0), ``"-"`` (proven < 0) or ``"?"``."""
        zero = tirx.const(0, str(i.ty))
        if self.az.can_prove(i >= zero):
            return "+"
        if self.az.can_prove(i < zero):
            return "-"
        return "?"

    def scalar(self, i, extent):
        if self.sign(i) == "-":
            return self.az.simplify(i + _as(extent, i))
        return i

    def vector(self, idx, extent):
        """``idx`` (a ``Ramp`` or ``Broadcast``) with each lane legalized; ``idx`` itself
        when every lane is proven non-negative."""
        n = int(idx.lanes)
        if isinstance(idx, tirx.Broadcast):
            base, stride = idx.value, tirx.const(0, str(idx.value.ty))
        else:
            base, stride = idx.base, idx.stride
        lanes = [self.az.simplify(base + stride * k) for k in range(n)]
        signs = [self.sign(x) for x in lanes]
        if all(s == "+" for s in signs):
            return idx
        ext = _as(extent, base)
        out = []
        for x, s in zip(lanes, signs):
            if s == "-":
                x = self.az.simplify(x + ext)
            elif s == "?":
                x = tirx.Select(x < tirx.const(0, str(x.ty)), self.az.simplify(x + ext), x)
            out.append(x)
        return tirx.Shuffle(out, [tirx.const(k, "int32") for k in range(n)])

    def indices(self, buf, indices) -> list | None:
        """The legalized indices, or ``None`` when nothing changes."""
        if len(indices) != len(buf.shape):
            return None
        out, changed = [], False
        for i, n in zip(indices, buf.shape):
            if isinstance(i, (tirx.Ramp, tirx.Broadcast)):
                j = self.vector(i, n)
            elif str(i.ty).startswith(("int", "uint")) and "x" not in str(i.ty):
                j = self.scalar(i, n)
            else:
                j = i
            changed |= not j.same_as(i)
            out.append(j)
        return out if changed else None

    def on_load(self, x):
        new = self.indices(x.source, list(x.indices))
        return x if new is None else tirx.BufferLoad(x.source, new, span=x.span)

    def on_region(self, r):
        """A tile operator's region (``T.copy(A[-4], F)``) starts where its first element
        would: a start proven negative counts from the end, the extent is kept."""
        if len(r.region) != len(r.source.shape):
            return r
        ranges, changed = [], False
        for rg, n in zip(r.region, r.source.shape):
            lo = rg.min
            if str(lo.ty).startswith(("int", "uint")) and "x" not in str(lo.ty):
                lo = self.scalar(lo, n)
            changed |= not lo.same_as(rg.min)
            ranges.append(rg if lo.same_as(rg.min) else tvm.ir.Range.from_min_extent(lo, rg.extent))
        return tirx.BufferRegion(r.source, ranges) if changed else r

    def on_store(self, s):
        new = self.indices(s.buffer, list(s.indices))
        if new is None:
            return s
        return tirx.BufferStore(s.buffer, s.value, new, span=s.span)


@function_pass("tl.LegalizeNegativeIndex")
def LegalizeNegativeIndex(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Negative indices of loads and stores count from the end of their dimension."""
    if func.body is None:
        return func
    az = Analyzer()
    _bind_scopes(func.body, az)
    lg = _Legalizer(az)
    body = tvm_ffi.structural_map(func.body, [(LOAD, lg.on_load),
                                              (tirx.BufferStore, lg.on_store),
                                              (tvm.ir.TensorRegion, lg.on_region)])
    return func if body.same_as(func.body) else func.with_body(body)


__all__ = ["LegalizeNegativeIndex"]
