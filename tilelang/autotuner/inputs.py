"""``set_autotune_inputs``: the tensors every candidate is checked and timed on.

    with set_autotune_inputs(A, B):
        kernel = matmul(M, N, K)

The tensors are the kernel's inputs in parameter order (the arguments a call of the compiled
kernel takes); all of its parameters, outputs included, are accepted too and the outputs are
dropped.  The context is per thread and nests.
"""

from __future__ import annotations

import threading
from typing import Any

_local = threading.local()


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class AutotuneInputs:
    """The context manager ``set_autotune_inputs`` returns."""

    def __init__(self, tensors: list):
        self.tensors = tensors

    def __enter__(self) -> "AutotuneInputs":
        _stack().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _stack().remove(self)


def set_autotune_inputs(*tensors: Any) -> AutotuneInputs:
    """Tune on these tensors instead of generated ones: ``set_autotune_inputs(a, b)`` or
    ``set_autotune_inputs([a, b])``."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    return AutotuneInputs(list(tensors))


def current_inputs() -> list | None:
    """The innermost ``set_autotune_inputs`` tensors of this thread, or None."""
    stack = _stack()
    return list(stack[-1].tensors) if stack else None


__all__ = ["AutotuneInputs", "current_inputs", "set_autotune_inputs"]
