"""``T.Tensor((M, K), dtype)``: the annotation of a kernel's tensor parameter."""

from __future__ import annotations

from typing import Any

from tvm.script import tirx as _T

from ..utils.dtype import canonical_dtype


class TensorProxy:
    """``T.Tensor(shape, dtype)`` (also ``T.Buffer``): a global-memory buffer parameter."""

    def __call__(self, shape: Any, dtype: Any = "float32", *args, **kwargs):
        if not isinstance(shape, (list, tuple)):
            shape = [shape]
        return _T.Buffer(list(shape), canonical_dtype(dtype, "T.Tensor"), *args, **kwargs)

    def __getitem__(self, keys):
        if not isinstance(keys, tuple) or len(keys) != 2:
            return self(keys)
        return self(*keys)

    def __or__(self, other):
        return self

    __ror__ = __or__


Tensor = TensorProxy()
Buffer = Tensor
FragmentBuffer = Tensor
SharedBuffer = Tensor
