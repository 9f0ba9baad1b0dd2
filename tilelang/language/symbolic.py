"""Symbolic sizes: ``T.dynamic("n")`` is a size bound from the tensors a kernel is called with."""

from __future__ import annotations

from tvm import tirx


def dynamic(name: str, dtype: str = "int32") -> tirx.Var:
    """A size variable usable in ``T.Tensor`` shapes and kernel arithmetic."""
    return tirx.Var(name, dtype)


symbolic = dynamic
