"""``T.Tensor((M, K), dtype)`` and ``T.StridedTensor((M, K), (S, 1), dtype)``: the
annotations of a kernel's tensor parameters."""

from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm import tirx
from tvm.script import tirx as _T

from ..errors import DSLError
from ..utils.dtype import canonical_dtype


class TensorProxy:
    """``T.Tensor(shape, dtype)`` (also ``T.Buffer``): a global-memory buffer parameter.
    ``T.Tensor(shape, T.ptr)`` is a table of addresses, held as int64 (see ``T.make_tensor``)."""

    def __call__(self, shape: Any, dtype: Any = "float32", *args, **kwargs):
        from .pointer import ADDRESS_DTYPE, is_ptr

        if not isinstance(shape, (list, tuple)):
            shape = [shape]
        for d, n in enumerate(shape):
            if isinstance(n, float) or (isinstance(n, int) and n < 0):
                raise DSLError(f"T.Tensor: dimension {d} is {n!r}; sizes are integers >= 0")
        dtype = ADDRESS_DTYPE if is_ptr(dtype) else canonical_dtype(dtype, "T.Tensor")
        data = args[0] if args else kwargs.get("data")
        source = _buffer_of_data(data)
        if source is not None and len(args) + len(kwargs) == 1:
            # T.Tensor(shape, dtype, X.data) in a kernel body: X's memory seen with this shape
            from .view import view

            return view(source, shape, None if dtype == source.dtype else dtype)
        return _T.Buffer(index_typed(shape), dtype, *args, **kwargs)

    def __getitem__(self, keys):
        if not isinstance(keys, tuple) or len(keys) != 2:
            return self(keys)
        return self(*keys)

    def __or__(self, other):
        return self

    __ror__ = __or__


INT32_MAX = 2**31 - 1


def _buffer_of_data(data: Any):
    """The buffer ``data`` is the memory of (``X.data``), or ``None``."""
    if isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op) \
            and data.op.name == "tirx.buffer_data" and len(data.args) == 1:
        return data.args[0]
    return None


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

class StridedTensorProxy:
    """``T.StridedTensor(shape, strides, dtype)`` (or ``T.StridedTensor[shape, strides,
    dtype]``): a global-memory buffer parameter with explicit strides, in elements of
    ``dtype``.  Strides may be constants or size variables (``T.dynamic``, ``T.const``); a call
    binds them from the tensor's strides, so non-contiguous views are accepted.  For a
    sub-byte ``dtype`` the strides count logical elements (see docs/language.md)."""

    def __call__(self, shape: Any, strides: Any, dtype: Any = "float32", *args, **kwargs):
        if not isinstance(shape, (list, tuple)):
            shape = [shape]
        if not isinstance(strides, (list, tuple)):
            strides = [strides]
        if len(strides) != len(shape):
            raise DSLError(f"T.StridedTensor: {len(shape)} dimensions {list(shape)} but "
                           f"{len(strides)} strides {list(strides)}; give one stride per "
                           "dimension")
        typed = index_typed(shape)
        strides = list(strides)
        if any(a is not b for a, b in zip(typed, shape)) or _max_offset(shape, strides) > INT32_MAX:
            strides = [tirx.IntImm("int64", int(s)) if isinstance(s, (int, tirx.IntImm)) else s
                       for s in strides]
        shape = typed
        dtype = canonical_dtype(dtype, "T.StridedTensor")
        # the tile layout TVM's lowering flattens accesses by: its default is row-major over
        # the shape, which would ignore the strides
        from tvm.tirx.layout import S, TileLayout

        kwargs.setdefault("layout", TileLayout(S[tuple(shape):tuple(strides)]))
        return _T.Buffer(shape, dtype, *args, strides=strides, **kwargs)

    def __getitem__(self, keys):
        if not isinstance(keys, tuple) or len(keys) not in (2, 3):
            from ..errors import DSLError

            raise DSLError("T.StridedTensor[shape, strides, dtype]: expected a shape, strides "
                           f"and a dtype, got {keys!r}")
        return self(*keys)


def _max_offset(shape: Sequence, strides: Sequence) -> int:
    """The largest element offset the constant sizes and strides reach (0 when any is
    symbolic)."""
    total = 0
    for n, s in zip(shape, strides):
        n = int(n.value) if isinstance(n, tirx.IntImm) else n
        s = int(s.value) if isinstance(s, tirx.IntImm) else s
        if not (isinstance(n, int) and isinstance(s, int)):
            return 0
        total += max(n - 1, 0) * abs(s)
    return total


Tensor = TensorProxy()
StridedTensor = StridedTensorProxy()
Buffer = Tensor
FragmentBuffer = Tensor
SharedBuffer = Tensor
