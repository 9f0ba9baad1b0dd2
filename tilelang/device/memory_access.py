"""Explicit memory accesses of a given width: 32/64/128/256-bit loads and stores of global
memory (optionally predicated) and of shared memory, and ``__ldg`` (a load through the
read-only data cache).

On CUDA each is a call of the ``tl::load_global_*`` / ``store_global_*`` / ``load_shared_*``
/ ``store_shared_*`` helpers of ``src/tl_templates/cuda/ldst.h`` (one ``ld``/``st``
instruction of that width) or of ``__ldg``.  Values are raw bits: ``uint32`` for 32 bits,
``uint32xN`` for wider accesses.  On the CPU the same access is an ordinary vector load or
store of the elements it covers, reinterpreted (:func:`cpu_form`).
"""

from __future__ import annotations

import tvm
from tvm import tirx

from .effects import Access, Effect, Memory, call, register_device_op

G, S = Memory.GLOBAL, Memory.SHARED
WIDTHS = (32, 64, 128, 256)


def bits_dtype(bits: int) -> str:
    """The dtype of a ``bits``-wide raw value: ``uint32`` or ``uint32xN``."""
    return "uint32" if bits == 32 else f"uint32x{bits // 32}"


def _emit_store(helper: str):
    """``tl::<helper>_<bits>[_conditional](addr, value[, pred])``; the call's arguments are
    (addr, bits, value[, pred])."""
    def emit(c):
        addr, bits, value, *pred = c.args
        name = f"tl::{helper}_{int(bits.value)}" + ("_conditional" if pred else "")
        return tirx.call_extern("void", name, addr, value, *pred)

    return emit


def _emit_load(helper: str):
    """``tl::store_to(dst, tl::<helper>_<bits>[_conditional](src[, pred]))``; the call's
    arguments are (dst, src, bits[, pred]).  The helper's value goes straight into ``dst``:
    TVM's CUDA code generation would split a call typed with a vector result into one call
    per lane, so the inner call is typed with the lane type (its C++ type is the vector)."""
    def emit(c):
        dst, src, bits, *pred = c.args
        name = f"tl::{helper}_{int(bits.value)}" + ("_conditional" if pred else "")
        return tirx.call_extern("void", "tl::store_to", dst,
                                tirx.call_extern("uint32", name, src, *pred))

    return emit


_LOADED = Access((0,), Memory.REGISTER, write=True)
LOAD_GLOBAL = register_device_op(
    "tl.device.load_global", Effect(accesses=(Access((1,), G), _LOADED)),
    _emit_load("load_global"),
    "one ld.global of 32..256 bits into a local; with a predicate, 0 where it is false "
    "(nothing is read)")
STORE_GLOBAL = register_device_op(
    "tl.device.store_global", Effect(accesses=(Access((0,), G, write=True),)),
    _emit_store("store_global"),
    "one st.global of 32..256 bits; with a predicate, nothing is written where it is false")
LOAD_SHARED = register_device_op(
    "tl.device.load_shared", Effect(accesses=(Access((1,), S), _LOADED)),
    _emit_load("load_shared"), "one ld.shared of 32..128 bits into a local")
STORE_SHARED = register_device_op(
    "tl.device.store_shared", Effect(accesses=(Access((0,), S, write=True),)),
    _emit_store("store_shared"), "one st.shared of 32..128 bits")
def _emit_ldg(c):
    """``__ldg(&(x[i]))``: the element's address written as CUDA code (and the public
    TileLang) writes it; TVM prints ``address_of`` as ``(&(x[i]))``, so the ``&`` is printed
    as a call of the address-of operator on the element."""
    element = c.args[0].args[0]
    # typed as the element (a handle would print with a (void*) cast): code generation only
    # prints it, as the argument of __ldg
    return tirx.call_extern(str(c.ty), "__ldg", tirx.call_extern(str(c.ty), "&", element))


LDG = register_device_op(
    "tl.device.ldg", Effect(accesses=(Access((0,), G),)), _emit_ldg,
    "__ldg(&x): a load through the read-only data cache")

LOADS = (LOAD_GLOBAL, LOAD_SHARED)
STORES = (STORE_GLOBAL, STORE_SHARED)


def load(op, dst_addr, src_addr, bits: int, pred=None) -> tvm.ir.Call:
    """Load ``bits`` at ``src_addr`` into the local element at ``dst_addr``."""
    args = [dst_addr, src_addr, bits] + ([] if pred is None else [pred])
    return call(op, *args, dtype="void")


def store(op, addr, bits: int, value, pred=None) -> tvm.ir.Call:
    args = [addr, bits, value] + ([] if pred is None else [pred])
    return call(op, *args, dtype="void")


def ldg(addr, dtype: str) -> tvm.ir.Call:
    return call(LDG, addr, dtype=dtype)


# CPU forms -------------------------------------------------------------------------------

def _elements(addr, bits: int):
    """(buffer, indices) of the ``bits`` wide run of elements starting at ``addr``
    (``address_of(buf[...])``): a ramp over the last index when it spans several."""
    start = addr.args[0]
    buf, idx = start.source, list(start.indices)
    n = bits // buf.dtype.bits
    if n > 1:
        idx[-1] = tirx.Ramp(idx[-1], tirx.const(1, str(idx[-1].ty)), n)
    return buf, idx


def cpu_form(c):
    """The plain TIR of an access call (an expression for ``__ldg``, a statement for the
    others), else ``None``."""
    op = getattr(c, "op", None)
    if op is None:
        return None
    if op.same_as(LDG.op):
        start = c.args[0].args[0]
        return tirx.BufferLoad(start.source, list(start.indices))
    if any(op.same_as(o.op) for o in LOADS):
        dst, addr, bits, *pred = c.args
        bits = int(bits.value)
        buf, idx = _elements(addr, bits)
        value = tirx.reinterpret(bits_dtype(bits), tirx.BufferLoad(buf, idx))
        if pred:
            zero = tirx.const(0, "uint32")
            if bits > 32:
                zero = tirx.Broadcast(zero, bits // 32)
            value = tirx.if_then_else(pred[0], value, zero)
        local = dst.args[0]
        return tirx.BufferStore(local.source, value, list(local.indices))
    if any(op.same_as(o.op) for o in STORES):
        addr, bits, value, *pred = c.args
        bits = int(bits.value)
        buf, idx = _elements(addr, bits)
        n = bits // buf.dtype.bits
        elem = str(buf.dtype) if n == 1 else f"{buf.dtype}x{n}"
        stmt = tirx.BufferStore(buf, tirx.reinterpret(elem, value), idx)
        return tirx.IfThenElse(pred[0], stmt, None) if pred else stmt
    return None
