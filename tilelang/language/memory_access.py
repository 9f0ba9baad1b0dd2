"""Explicit memory accesses: ``T.ldg32/64/128/256`` and ``T.stg32/64/128/256`` (global memory,
optionally predicated), ``T.lds32/64/128`` and ``T.sts32/64/128`` (shared memory), and
``T.__ldg`` (a load through the read-only data cache).

An access of ``N`` bits covers the elements of a slice (``X[i:i+4]``: exactly ``N`` bits of
them), of a whole buffer (likewise), or the ``N`` bits of elements starting at an element
(``X[i]``).  The slice is contiguous: one element per dimension except the last.  A load
returns the raw bits (``uint32`` for 32 bits, ``uint32x2/x4/x8`` for 64/128/256), which
``T.reinterpret`` turns into elements; a store takes a value of exactly ``N`` bits.  With
``pred`` false a predicated load reads nothing and returns 0, a predicated store writes
nothing.  The address must be aligned to the access width (CUDA faults otherwise).  Each
access is one instruction on CUDA and an ordinary load or store on the CPU.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx
from tvm.script import tirx as _T
from tvm.script.ir_builder import IRBuilder

from ..device import memory_access as dev
from ..errors import DSLError, DSLTypeError
from ..ops import region as R
from .allocate import LOCAL
from .kernel import _current

GLOBAL_SCOPES = ("global",)
SHARED_SCOPES = ("shared", "shared.dyn")


def _start(target: Any, bits: int, op: str, role: str, scopes: tuple) -> Any:
    """``address_of`` the first element of the ``bits`` wide access ``target`` names."""
    target = getattr(target, "scalar", target)
    if R.is_element(target):
        buf, idx, count = target.source, list(target.indices), None
    elif R.is_buffer(target) or R.is_region(target):
        region = R.region_of(target, op, role)
        buf, idx = region.source, R.mins(region)
        ext = R.extents(region)
        if any(R.as_int(e) != 1 for e in ext[:-1]):
            raise DSLError(f"{op}: {role} {R.describe(region)} is not contiguous; slice the last "
                           f"dimension only")
        count = R.as_int(ext[-1])
    else:
        raise DSLTypeError(f"{op}: {role} must be a buffer, a slice or an element of one, got "
                           f"{target!r}")
    scope = buf.scope()
    if scope not in scopes:
        where = "global" if scopes == GLOBAL_SCOPES else "shared"
        raise DSLError(f"{op}: {role} {buf.name} is in {scope} memory; {op} accesses {where} "
                       f"memory")
    elem = buf.dtype.bits * buf.dtype.lanes
    if bits % elem:
        raise DSLError(f"{op}: {bits} bits are not a whole number of {buf.dtype} elements of "
                       f"{buf.name}")
    if count is not None and count * elem != bits:
        raise DSLError(f"{op}: {role} covers {count} {buf.dtype} elements of {buf.name} "
                       f"({count * elem} bits); {op} accesses {bits} bits")
    return tirx.address_of(tirx.BufferLoad(buf, idx))


def _scalar(x: Any) -> bool:
    return isinstance(x, tvm.ir.Expr) and isinstance(x.ty, tvm.ir.PrimType)


def _pred(pred: Any, op: str):
    if pred is None:
        return None
    if hasattr(pred, "asobject"):  # ``a == b`` / ``a != b`` of TVM expressions, unevaluated
        pred = pred.asobject()
    if isinstance(pred, (bool, int)):
        return tirx.const(bool(pred), "bool")
    if _scalar(pred):
        dt = pred.ty.dtype
        if dt.is_bool:
            return pred
        if dt.is_integer:
            return pred != tirx.const(0, str(dt))
    raise DSLTypeError(f"{op}: pred must be a boolean condition, got {pred!r}")


def _value(value: Any, bits: int, op: str):
    """``value`` as the raw ``bits``-wide value the store takes."""
    value = getattr(value, "scalar", value)
    want = dev.bits_dtype(bits)
    if isinstance(value, int) and not isinstance(value, bool) and bits == 32:
        return tirx.const(value & 0xFFFFFFFF, want)
    if not _scalar(value):
        raise DSLTypeError(f"{op}: the value must be a {bits}-bit expression, got {value!r}")
    dt = value.ty.dtype
    if dt.bits * dt.lanes != bits:
        raise DSLError(f"{op}: the value is {dt} ({dt.bits * dt.lanes} bits); {op} stores "
                       f"{bits} bits (e.g. a {want}, or T.reinterpret(x, {want!r}))")
    return value if str(dt) == want else tirx.reinterpret(want, value)


def _load(op_name: str, src: Any, bits: int, pred: Any = None, shared: bool = False) -> Any:
    """Emit the load into a fresh per-thread variable (a statement at the current place of
    the program) and return that variable's value."""
    _current(op_name)
    scopes = SHARED_SCOPES if shared else GLOBAL_SCOPES
    addr = _start(src, bits, op_name, "src", scopes)
    pred = _pred(pred, op_name)
    local = _T.alloc_buffer([1], dev.bits_dtype(bits), scope=LOCAL)
    IRBuilder.name(op_name[2:] + "_bits", local)
    dst = tirx.BufferLoad(local, [tirx.const(0, "int32")])
    _T.evaluate(dev.load(dev.LOAD_SHARED if shared else dev.LOAD_GLOBAL, tirx.address_of(dst),
                         addr, bits, pred))
    return dst


def _store(op_name: str, dst: Any, value: Any, bits: int, pred: Any = None,
           shared: bool = False) -> Any:
    scopes = SHARED_SCOPES if shared else GLOBAL_SCOPES
    addr = _start(dst, bits, op_name, "dst", scopes)
    return dev.store(dev.STORE_SHARED if shared else dev.STORE_GLOBAL, addr, bits,
                     _value(value, bits, op_name), _pred(pred, op_name))


def ldg32(src: Any, pred: Any = None) -> Any:
    """32 bits of global memory at ``src`` as a ``uint32`` (see the module doc)."""
    return _load("T.ldg32", src, 32, pred)


def ldg64(src: Any, pred: Any = None) -> Any:
    """64 bits of global memory at ``src`` as a ``uint32x2``."""
    return _load("T.ldg64", src, 64, pred)


def ldg128(src: Any, pred: Any = None) -> Any:
    """128 bits of global memory at ``src`` as a ``uint32x4``."""
    return _load("T.ldg128", src, 128, pred)


def ldg256(src: Any, pred: Any = None) -> Any:
    """256 bits of global memory at ``src`` as a ``uint32x8`` (one access on sm_100 and
    later, two 128-bit ones before)."""
    return _load("T.ldg256", src, 256, pred)


def stg32(dst: Any, value: Any, pred: Any = None) -> Any:
    """Store the 32-bit ``value`` to global memory at ``dst``."""
    return _store("T.stg32", dst, value, 32, pred)


def stg64(dst: Any, value: Any, pred: Any = None) -> Any:
    """Store the 64-bit ``value`` (a ``uint32x2``) to global memory at ``dst``."""
    return _store("T.stg64", dst, value, 64, pred)


def stg128(dst: Any, value: Any, pred: Any = None) -> Any:
    """Store the 128-bit ``value`` (a ``uint32x4``) to global memory at ``dst``."""
    return _store("T.stg128", dst, value, 128, pred)


def stg256(dst: Any, value: Any, pred: Any = None) -> Any:
    """Store the 256-bit ``value`` (a ``uint32x8``) to global memory at ``dst``."""
    return _store("T.stg256", dst, value, 256, pred)


def lds32(src: Any) -> Any:
    """32 bits of shared memory at ``src`` as a ``uint32``."""
    return _load("T.lds32", src, 32, shared=True)


def lds64(src: Any) -> Any:
    """64 bits of shared memory at ``src`` as a ``uint32x2``."""
    return _load("T.lds64", src, 64, shared=True)


def lds128(src: Any) -> Any:
    """128 bits of shared memory at ``src`` as a ``uint32x4``."""
    return _load("T.lds128", src, 128, shared=True)


def sts32(dst: Any, value: Any) -> Any:
    """Store the 32-bit ``value`` to shared memory at ``dst``."""
    return _store("T.sts32", dst, value, 32, shared=True)


def sts64(dst: Any, value: Any) -> Any:
    """Store the 64-bit ``value`` to shared memory at ``dst``."""
    return _store("T.sts64", dst, value, 64, shared=True)


def sts128(dst: Any, value: Any) -> Any:
    """Store the 128-bit ``value`` to shared memory at ``dst``."""
    return _store("T.sts128", dst, value, 128, shared=True)


def __ldg(load_or_buf: Any, index: Any = None) -> Any:
    """The element ``x[i]`` of global memory, read through the read-only data cache
    (``__ldg(&x[i])`` on CUDA, an ordinary load elsewhere): ``T.__ldg(x[i])`` or
    ``T.__ldg(x, i)``.  The memory must not be written while the kernel runs."""
    op = "T.__ldg"
    if R.is_buffer(load_or_buf):
        if index is None:
            raise DSLError(f"{op}(buffer, index): the index is missing")
        idx = list(index) if isinstance(index, (list, tuple)) else [index]
        if len(idx) != len(load_or_buf.shape):
            raise DSLError(f"{op}: {len(idx)} indices for {load_or_buf.name} of "
                           f"{len(load_or_buf.shape)} dimensions")
        load_or_buf = tirx.BufferLoad(load_or_buf, idx)
    if not R.is_element(load_or_buf):
        raise DSLTypeError(f"{op}: expects an element x[i] of a global buffer (or x, i), got "
                           f"{load_or_buf!r}")
    buf = load_or_buf.source
    if buf.scope() not in GLOBAL_SCOPES:
        raise DSLError(f"{op}: {buf.name} is in {buf.scope()} memory; __ldg reads global memory")
    return dev.ldg(tirx.address_of(load_or_buf), str(buf.dtype))


__all__ = ["ldg32", "ldg64", "ldg128", "ldg256", "stg32", "stg64", "stg128", "stg256", "lds32",
           "lds64", "lds128", "sts32", "sts64", "sts128", "__ldg"]
