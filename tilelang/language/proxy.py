"""``T.Tensor((M, K), dtype)``: the annotation of a kernel's tensor parameter."""

from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm import tirx
from tvm.script import tirx as _T

from ..utils.dtype import canonical_dtype


class TensorProxy:
    """``T.Tensor(shape, dtype)`` (also ``T.Buffer``): a global-memory buffer parameter.
    ``T.Tensor(shape, T.ptr)`` is a table of addresses, held as int64 (see ``T.make_tensor``)."""

    def __call__(self, shape: Any, dtype: Any = "float32", *args, **kwargs):
        from .pointer import ADDRESS_DTYPE, is_ptr

        if not isinstance(shape, (list, tuple)):
            shape = [shape]
        dtype = ADDRESS_DTYPE if is_ptr(dtype) else canonical_dtype(dtype, "T.Tensor")
        return _T.Buffer(index_typed(shape), dtype, *args, **kwargs)

    def __getitem__(self, keys):
        if not isinstance(keys, tuple) or len(keys) != 2:
            return self(keys)
        return self(*keys)

    def __or__(self, other):
        return self

    __ror__ = __or__


INT32_MAX = 2**31 - 1


def index_typed(shape: Sequence) -> list:
    """``shape`` with the integer type its index arithmetic needs: constant sizes become int64
    when the tensor can hold more than 2**31-1 elements (its constant sizes alone multiply past
    that, or a size variable is int64), so that flat offsets are computed in 64 bits."""
    shape = list(shape)
    static = 1
    wide = False
    for s in shape:
        if isinstance(s, tirx.IntImm):
            s = int(s.value)
        if isinstance(s, int):
            static *= s
        elif isinstance(s, tvm.ir.Expr) and str(s.ty) == "int64":
            wide = True
    if not (wide or static > INT32_MAX):
        return shape
    return [tirx.IntImm("int64", int(s)) if isinstance(s, (int, tirx.IntImm)) else s
            for s in shape]

Tensor = TensorProxy()
Buffer = Tensor
FragmentBuffer = Tensor
SharedBuffer = Tensor
