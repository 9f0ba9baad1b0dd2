"""``ScalarizeUnalignedVectors`` (GPU targets): a vector access is one wide memory instruction
only where its address is proven aligned to the vector's size; any other vector access is
done lane by lane.

A contiguous vector access ``A[T.Ramp(base, 1, n)]`` (written with ``T.Ramp``, or made by
TVM's vectorizer from ``T.vectorized`` / a vectorized tile-op loop) is printed by the CUDA code
generator as one ``float4``-style access at ``A + base``, which faults ("misaligned address")
unless ``base`` is a multiple of ``n``.  TVM checks that for loads only; a store is printed wide
whatever its base.  This pass runs after TVM's vectorizer (on flat buffers) and proves, under
the loop ranges, thread extents and bindings, that the element offset of each such access
(the buffer's ``elem_offset`` plus ``base``) is a multiple of the vector's lane count (its
largest power-of-two divisor), whatever the sign of a runtime term.  An access it cannot
prove gets its lanes' indices listed one by one, which the code generator emits as ``n``
scalar accesses.  Accesses of ``n`` lanes at a constant or ``k * n``-strided offset (what the
tile operators emit) are untouched.
"""

from __future__ import annotations

import logging

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from ..engine.target import is_cpu
from .negative_index import LOAD, _bind_scopes
from .passes import function_pass, target_of

log = logging.getLogger("tilelang")


def _pow2_part(n: int) -> int:
    return n & -n


def _low_zero_bits(e, az: Analyzer, depth: int = 0) -> int:
    """How many low bits of the integer ``e`` are known to be zero (bitwise reasoning the
    analyzer's modular sets lack: swizzles xor multiples of the vector width)."""
    ms = az.modular_set(e)
    coeff, base = int(ms.coeff), int(ms.base)
    known = _ctz(coeff) if coeff else 64
    known = min(known, _ctz(base)) if base else known
    if depth > 8:
        return known
    if isinstance(e, (tirx.Add, tirx.Sub, tirx.Min, tirx.Max)):
        return max(known, min(_low_zero_bits(e.a, az, depth + 1),
                              _low_zero_bits(e.b, az, depth + 1)))
    if isinstance(e, tirx.Mul):
        return max(known, _low_zero_bits(e.a, az, depth + 1) + _low_zero_bits(e.b, az, depth + 1))
    if isinstance(e, tirx.Select):
        return max(known, min(_low_zero_bits(e.true_value, az, depth + 1),
                              _low_zero_bits(e.false_value, az, depth + 1)))
    if isinstance(e, (tirx.BitwiseXor, tirx.BitwiseOr)):
        return max(known, min(_low_zero_bits(e.a, az, depth + 1),
                              _low_zero_bits(e.b, az, depth + 1)))
    if isinstance(e, tirx.BitwiseAnd):
        return max(known, _low_zero_bits(e.a, az, depth + 1), _low_zero_bits(e.b, az, depth + 1))
    if isinstance(e, tirx.LShift) and isinstance(e.b, tirx.IntImm):
        return max(known, _low_zero_bits(e.a, az, depth + 1) + int(e.b.value))
    return known


def _ctz(v: int) -> int:
    v = abs(v)
    return (v & -v).bit_length() - 1 if v else 64


def _aligned(offset, lanes: int, az: Analyzer) -> bool:
    """Whether the element offset ``offset`` is provably a multiple of ``lanes``."""
    need = _pow2_part(lanes)
    if need == 1:
        return True
    offset = az.simplify(offset)
    if az.can_prove(tirx.floormod(offset, tirx.const(need, str(offset.ty))) == 0):
        return True
    return _low_zero_bits(offset, az) >= need.bit_length() - 1


def _flat_offset(buf, indices):
    """The element offset of ``buf[indices]`` (the ramp's base standing for its lanes), or
    ``None`` when the access is not one contiguous run along the last dimension."""
    last = indices[-1]
    if not (isinstance(last, tirx.Ramp) and isinstance(last.stride, tirx.IntImm)
            and int(last.stride.value) == 1):
        return None
    if any("x" in str(i.ty) for i in indices[:-1]):
        return None
    dt = str(last.base.ty)
    offset = last.base
    stride = tirx.const(1, dt)
    strides = list(buf.strides) if len(buf.strides) else None
    for d in range(len(indices) - 2, -1, -1):
        stride = strides[d] if strides else stride * _cast(buf.shape[d + 1], dt)
        offset = offset + _cast(indices[d], dt) * _cast(stride, dt)
    eo = buf.elem_offset
    if eo is not None and not (isinstance(eo, tirx.IntImm) and int(eo.value) == 0):
        offset = offset + _cast(eo, dt)
    return offset


def _cast(e, dt: str):
    return e if str(e.ty) == dt else tirx.Cast(dt, e)


def _by_lane(ramp):
    n = int(ramp.lanes)
    return tirx.Shuffle([ramp.base + ramp.stride * k for k in range(n)],
                        [tirx.const(k, "int32") for k in range(n)])


class _Scalarize:
    def __init__(self, az: Analyzer, kernel: str):
        self.az, self.kernel = az, kernel
        self.count = 0

    def indices(self, buf, indices, what: str):
        """``indices`` with an unproven contiguous vector index listed lane by lane, or
        ``None`` when the access stays one wide access."""
        if not indices:
            return None
        offset = _flat_offset(buf, indices)
        if offset is None or _aligned(offset, int(indices[-1].lanes), self.az):
            return None
        self.count += 1
        log.debug("%s: %s of %s at %s is not provably aligned to %d lanes; done lane by lane",
                  self.kernel, what, buf.name, indices[-1], int(indices[-1].lanes))
        return indices[:-1] + [_by_lane(indices[-1])]

    def on_load(self, x):
        new = self.indices(x.source, list(x.indices), "load")
        return x if new is None else tirx.BufferLoad(x.source, new, span=x.span)

    def on_store(self, s):
        new = self.indices(s.buffer, list(s.indices), "store")
        return s if new is None else tirx.BufferStore(s.buffer, s.value, new, span=s.span)


@function_pass("tl.ScalarizeUnalignedVectors")
def ScalarizeUnalignedVectors(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """GPU: contiguous vector accesses not proven aligned to their width go lane by lane."""
    if func.body is None or is_cpu(target_of(func)):
        return func
    az = Analyzer()
    _bind_scopes(func.body, az)
    name = func.attrs.get("global_symbol", "kernel") if func.attrs is not None else "kernel"
    sc = _Scalarize(az, str(name))
    body = tvm_ffi.structural_map(func.body, [(LOAD, sc.on_load), (tirx.BufferStore, sc.on_store)])
    return func if body.same_as(func.body) else func.with_body(body)


__all__ = ["ScalarizeUnalignedVectors"]
