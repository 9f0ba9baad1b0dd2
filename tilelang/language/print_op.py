"""``T.print``: print a value (or every element of a buffer) from a kernel."""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx
from tvm.script import tirx as _T

from ..ops import region as R
from ..ops.loops import dtype_of


def print(obj: Any, msg: str = "") -> None:  # noqa: A001  (the DSL's name)
    """Print ``obj`` with ``msg``; a buffer prints every element with its index."""
    obj = getattr(obj, "scalar", obj)
    if R.is_buffer(obj):
        import itertools

        for idx in itertools.product(*[range(int(s)) for s in obj.shape]):
            _emit(f"{msg} {obj.name}{list(idx)} = ", tirx.BufferLoad(obj, list(idx)))
        return None
    _emit(f"{msg} ", obj)
    return None


def _emit(prefix: str, value) -> None:
    fmt = "%f" if dtype_of(value).startswith(("float", "bfloat")) else "%lld"
    v = tirx.Cast("float64" if fmt == "%f" else "int64", value)
    _T.evaluate(tirx.call_extern("int32", "printf", tvm.ir.StringImm(prefix + fmt + "\n"), v))
