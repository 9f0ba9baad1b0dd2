"""Symbolic sizes: ``T.dynamic("n")`` is a size bound from the tensors a kernel is called with."""

from __future__ import annotations

import re
from typing import Any

from tvm import tirx

from ..errors import DSLError
from ..utils.dtype import canonical_dtype

SIZE_DTYPES = ("int32", "int64")


def dynamic(name: str, dtype: Any = "int32") -> tirx.Var | tuple:
    """A size variable usable in ``T.Tensor`` shapes and kernel arithmetic; several names
    (``T.dynamic("m, n")``) give a tuple of variables.  An ``int32`` size takes values up to
    2**31-1 and tensors using it hold at most 2**31-1 elements; an ``int64`` size makes the
    index arithmetic of its tensors 64-bit."""
    dtype = canonical_dtype(dtype, f"T.dynamic({name!r})")
    if dtype not in SIZE_DTYPES:
        raise DSLError(f"T.dynamic({name!r}): a size has dtype int32 or int64, got {dtype}")
    names = [n for n in re.split(r"[,\s]+", name.strip()) if n]
    if not names or not all(n.isidentifier() for n in names):
        raise DSLError(f"T.dynamic({name!r}): expected identifiers separated by commas or "
                       f"spaces")
    vars_ = tuple(tirx.Var(n, str(dtype)) for n in names)
    return vars_[0] if len(vars_) == 1 else vars_


symbolic = dynamic
