"""Raw pointers: ``T.ptr`` and ``T.make_tensor``.

A kernel parameter annotated ``T.ptr`` is an address (called with a tensor, whose data pointer
is passed, or with an integer address such as ``t.data_ptr()``).  ``T.Tensor((n,), T.ptr)`` is
a table of addresses, stored as int64.  ``T.make_tensor(p, shape, dtype)`` is a tensor over
the memory ``p`` points to, used like a tensor parameter; nothing checks that the memory holds
that many elements.
"""

from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm import tirx
from tvm.script import tirx as _T
from tvm.tirx.buffer import is_buffer_var

from ..errors import DSLError, DSLTypeError
from ..utils.dtype import canonical_dtype
from .extent import positive_extent

#: the element type of a tensor of pointers (``T.Tensor((n,), T.ptr)``)
ADDRESS_DTYPE = "int64"


def ptr(dtype: Any = None, storage_scope: str = "global") -> tvm.ir.Var:
    """A pointer: as a parameter annotation (``a: T.ptr`` or ``a: T.ptr()``), an address into
    ``storage_scope`` memory; ``dtype`` optionally names the element type it points to."""
    if dtype is not None:
        dtype = str(canonical_dtype(dtype, "T.ptr"))
    return _T.handle(dtype, storage_scope)


def is_ptr(value: Any) -> bool:
    """Whether ``value`` is the ``T.ptr`` annotation itself (used as a tensor's dtype)."""
    return value is ptr


def make_tensor(ptr: Any, shape: Sequence | Any, dtype: Any = "float32",
                strides: Sequence | None = None) -> Any:
    """A global-memory tensor of ``shape`` and ``dtype`` over the memory at ``ptr``: a
    ``T.ptr`` parameter, or a 64-bit integer address (an element of a ``T.Tensor(..., T.ptr)``
    table).  ``strides`` (in elements) default to row-major."""
    op = "T.make_tensor"
    data = _address(ptr, op)
    dims = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    if not dims:
        raise DSLError(f"{op}: the shape needs at least one dimension")
    dims = [positive_extent(d, op, f"dimension {i} of shape {tuple(dims)}")
            for i, d in enumerate(dims)]
    if strides is not None:
        strides = list(strides) if isinstance(strides, (list, tuple)) else [strides]
        if len(strides) != len(dims):
            raise DSLError(f"{op}: {len(strides)} strides {tuple(strides)} for the "
                           f"{len(dims)}-dimensional shape {tuple(dims)}")
    return _T.decl_buffer(dims, canonical_dtype(dtype, op), data=data, strides=strides)


def _address(value: Any, op: str) -> Any:
    """``value`` as a pointer expression, or a DSLError saying what ``op`` accepts."""
    value = getattr(value, "scalar", value)  # a T.alloc_var holding an address
    if is_buffer_var(value):
        raise DSLTypeError(f"{op}: expected a pointer (a T.ptr parameter or an address loaded "
                           f"from a T.Tensor(..., T.ptr) table), got the buffer {value.name}; "
                           f"use T.view / T.reshape for another view of a buffer")
    if isinstance(value, tvm.ir.Expr):
        ty = value.ty
        if isinstance(ty, tvm.ir.PointerType):
            return value
        if isinstance(ty, tvm.ir.PrimType) and str(ty.dtype) in ("int64", "uint64"):
            return tirx.reinterpret("handle", value)
        raise DSLTypeError(f"{op}: expected a pointer or a 64-bit integer address, got "
                           f"{value} of type {ty}")
    raise DSLTypeError(f"{op}: expected a pointer (a T.ptr parameter or an address loaded "
                       f"from a T.Tensor(..., T.ptr) table), got {type(value).__name__} "
                       f"{value!r}")


def kernel_addressed(body: tirx.Stmt) -> frozenset:
    """The handles of the tensors in ``body`` whose address the kernel computes (a
    ``T.make_tensor`` over an address loaded from a table), as opposed to one a kernel
    parameter holds.  The host knows no such address before the launch (no TMA tensor map can
    be encoded for them)."""
    import tvm_ffi

    found: set = set()

    def on_decl(s):
        if s.buffer.scope() == "global" and not isinstance(s.data, tvm.ir.Var):
            found.add(s.buffer.__chandle__())

    tvm_ffi.structural_walk(body, (tirx.DeclBuffer, on_decl))
    return frozenset(found)


__all__ = ["make_tensor", "ptr"]
