"""``PackSubByteStores``: a scalar store of a sub-byte element (``float4_e2m1fn``, ``int4``,
``uint2`` ...) changes only its own bits of the byte that packs it.

TVM's code generators address a sub-byte element through the byte holding it, but a store
writes that whole byte (CUDA) or a byte per element (LLVM), so two elements sharing a byte
overwrite each other.  This pass writes each such store as a read-modify-write of the byte,
through a ``uint8`` view of the same memory:

    byte[off // pack] = byte[off // pack] & ~(mask << shift) | (bits(value) << shift)

with ``shift = (off % pack) * width``.  ``bits(value)`` is taken from the source byte when the
value is an element of another sub-byte buffer of the same type (a move, the same on every
target); a sub-byte *integer* value is truncated to its width.  A loop marked vectorized whose
body has such a store runs serially (its lanes would share bytes).  On the CPU, sub-byte
integer loads are read the same way (LLVM would give each element a byte); other sub-byte
values (a float4 converted to or from another type) have no CPU lowering in TVM, and are a
``LoweringError`` naming the buffer.

Concurrent stores by different threads to the two halves of one byte still race, as they do
in the public TileLang: give each thread whole bytes.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from ..engine.target import is_cpu
from ..errors import LoweringError
from ..ir_utils import StmtMutator, map_nodes, seq
from ..utils.dtype import elements_per_byte
from .passes import function_pass, kernel_name, target_of

U8 = "uint8"


def _pack(buf) -> int:
    return elements_per_byte(str(buf.dtype)) if is_buffer_var(buf) else 1


def _flat_offset(buf, indices) -> tirx.PrimExpr:
    """The element offset of ``buf[indices]`` from the start of its memory."""
    if len(buf.strides):
        strides = list(buf.strides)
    else:
        strides, step = [], tirx.const(1, "int32")
        for n in reversed(list(buf.shape)):
            strides.append(step)
            step = step * n
        strides.reverse()
    off = tirx.const(0, "int32")
    for i, s in zip(indices, strides):
        off = off + i * s
    return off


def _is_scalar(expr) -> bool:
    return getattr(expr.ty, "lanes", 1) == 1


class _Nibbles:
    """The uint8 view of a sub-byte buffer, and the pieces of its bit arithmetic."""

    def __init__(self, buf):
        self.buf = buf
        self.pack = _pack(buf)
        self.width = 8 // self.pack
        self.mask = (1 << self.width) - 1
        self.view = tirx.decl_buffer((_byte_count(buf),), U8, f"{buf.name}_bytes",
                                     scope=buf.scope(), layout=None)
        self.decl = tirx.DeclBuffer(self.view, data=buf.data)

    def where(self, indices) -> tuple[tirx.PrimExpr, tirx.PrimExpr]:
        """(byte index, bit shift as uint8) of ``buf[indices]``."""
        off = _flat_offset(self.buf, indices)
        byte = tirx.floordiv(off, self.pack)
        shift = tirx.Cast(U8, tirx.floormod(off, self.pack) * self.width)
        return byte, shift

    def read(self, indices) -> tirx.PrimExpr:
        """The bits of ``buf[indices]`` in the low bits of a uint8."""
        byte, shift = self.where(indices)
        return tirx.bitwise_and(tirx.shift_right(tirx.BufferLoad(self.view, [byte]), shift),
                                tirx.const(self.mask, U8))

    def write(self, indices, bits: tirx.PrimExpr) -> tirx.Stmt:
        byte, shift = self.where(indices)
        old = tirx.BufferLoad(self.view, [byte])
        keep = tirx.bitwise_not(tirx.shift_left(tirx.const(self.mask, U8), shift))
        new = tirx.bitwise_or(tirx.bitwise_and(old, keep),
                              tirx.shift_left(tirx.bitwise_and(bits, tirx.const(self.mask, U8)),
                                              shift))
        return tirx.BufferStore(self.view, new, [byte])


def _byte_count(buf) -> tirx.PrimExpr:
    """Bytes spanned by ``buf`` (its last element's byte, plus one)."""
    last = _flat_offset(buf, [n - 1 for n in buf.shape])
    return tirx.floordiv(last, _pack(buf)) + 1


def _integer_value(bits: tirx.PrimExpr, dtype: str, width: int) -> tirx.PrimExpr:
    """``bits`` (uint8, the low ``width`` bits) as a value of the sub-byte integer ``dtype``."""
    if dtype.startswith("uint"):
        return tirx.Cast(dtype, bits)
    up = tirx.const(8 - width, "int8")
    signed = tirx.shift_right(tirx.shift_left(tirx.reinterpret("int8", bits), up), up)
    return tirx.Cast(dtype, signed)


class _Pack(StmtMutator):
    def __init__(self, cpu: bool, kernel: str):
        self.cpu = cpu
        self.kernel = kernel
        self.packed_store = False  # set while visiting a loop body: it stores sub-byte values

    # loads (CPU) -------------------------------------------------------------------
    def _loads(self, expr, decls: list):
        """``expr`` with its sub-byte integer loads read from bytes (CPU only)."""
        if not self.cpu:
            return expr

        def on_load(load):
            if _pack(load.source) == 1:
                return load
            dtype = str(load.source.dtype)
            if not dtype.startswith(("int", "uint")) or not _is_scalar(load):
                raise LoweringError(
                    f"kernel {self.kernel}: {load.source.name} holds {dtype} elements, which the "
                    f"CPU backend can only move between {dtype} buffers (TVM has no CPU "
                    f"conversion of {dtype} values); compile for CUDA, or store its bytes "
                    f"(T.view({load.source.name}, dtype=T.uint8))")
            n = _Nibbles(load.source)
            decls.append(n.decl)
            return _integer_value(n.read(list(load.indices)), dtype, n.width)

        return map_nodes(expr, [(tvm.ir.TensorLoad, on_load)])

    # stores ------------------------------------------------------------------------
    def visit_BufferStore(self, s):
        decls: list = []
        pack = _pack(s.buffer)
        if pack == 1 or not _is_scalar(s.value):
            if pack > 1 and self.cpu:
                raise LoweringError(f"kernel {self.kernel}: a vector store into {s.buffer.name} "
                                    f"({s.buffer.dtype}) has no CPU lowering")
            value = self._loads(s.value, decls)
            indices = [self._loads(i, decls) for i in s.indices]
            if not decls:
                return s
            return seq(decls + [tirx.BufferStore(s.buffer, value, indices, span=s.span)])
        dst = _Nibbles(s.buffer)
        decls.append(dst.decl)
        v = s.value
        if isinstance(v, tvm.ir.TensorLoad) and str(v.source.dtype) == str(s.buffer.dtype):
            src = _Nibbles(v.source)  # a move: the bits themselves
            decls.append(src.decl)
            bits = src.read([self._loads(i, decls) for i in v.indices])
        elif str(s.buffer.dtype).startswith(("int", "uint")):
            bits = tirx.Cast(U8, tirx.Cast("int32", self._loads(v, decls)))
        elif self.cpu:
            raise LoweringError(
                f"kernel {self.kernel}: a {s.buffer.dtype} value computed from other types is "
                f"stored into {s.buffer.name}; the CPU backend has no {s.buffer.dtype} "
                "conversions (TVM); compile for CUDA")
        else:
            return s  # a converted float value: TVM's CUDA store (see the module docstring)
        self.packed_store = True
        indices = [self._loads(i, decls) for i in s.indices]
        return seq(decls + [dst.write(indices, bits)])

    def visit_For(self, s):
        outer, self.packed_store = self.packed_store, False
        out = self.generic(s)
        if self.packed_store and s.kind == tirx.ForKind.VECTORIZED:
            out = tirx.For(out.loop_var, out.min, out.extent, tirx.ForKind.SERIAL, out.body,
                           out.thread_binding, out.annotations, out.step, span=s.span)
        self.packed_store = outer or self.packed_store
        return out

    def visit_IfThenElse(self, s):
        decls: list = []
        cond = self._loads(s.condition, decls)
        out = self.generic(s)
        if not decls:
            return out
        return seq(decls + [tirx.IfThenElse(cond, out.then_case, out.else_case, span=s.span)])


@function_pass("tl.PackSubByteStores")
def PackSubByteStores(func: tirx.PrimFunc) -> tirx.PrimFunc:
    name = kernel_name(func, "main")
    return func.with_body(_Pack(is_cpu(target_of(func)), name)(func.body))


__all__ = ["PackSubByteStores"]
