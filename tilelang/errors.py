"""The exceptions tilelang raises, so that callers can tell misuse from compiler failure."""

from __future__ import annotations

import linecache
from typing import Any


class TileLangError(Exception):
    """Base class of every error tilelang raises on purpose."""


class DSLError(TileLangError, ValueError):
    """A kernel program misuses the language: a tile operator got regions of the wrong shape,
    an unknown dtype, a dimension that does not exist.  The message names the op, the buffers
    and the user's source line."""


class DSLTypeError(DSLError, TypeError):
    """A kernel program passed a value of the wrong type to the language (``threads=1.5``,
    ``T.fill(A, "x")``); a :class:`DSLError` that is also a ``TypeError``."""


class TileOpError(DSLError):
    """Raised by a tile-operator builder while the program is parsed; the parser adds the
    source line and re-raises it as a :class:`DSLError`."""


class LoweringError(TileLangError, RuntimeError):
    """A pass could not lower a program for the chosen target (unsupported feature).  When a
    tile operator fails, the message ends with the user's source line of that operator."""


class CompileError(TileLangError, RuntimeError):
    """The native compiler (nvcc, NVRTC, LLVM) rejected generated code; the message holds its
    output and the path where the source was saved."""


class KernelArgumentError(TileLangError, ValueError):
    """A compiled kernel was called with the wrong number, dtype, shape, device or layout of
    arguments; the message names the parameter and what was expected."""


class ReferenceUnsupportedError(TileLangError, RuntimeError):
    """``kernel.verify`` cannot run the program on the CPU reference backend (it reads thread
    indices, uses explicit barriers or thread roles); the message says which."""


class KernelMismatchError(TileLangError, AssertionError):
    """``kernel.verify`` found an element where the kernel and the CPU reference disagree; the
    message (and ``.mismatch``) give the parameter, index, both values and the grid block."""

    def __init__(self, message: str, mismatch=None):
        super().__init__(message)
        self.mismatch = mismatch


class KernelArgumentTypeError(KernelArgumentError, TypeError):
    """A compiled kernel was called with an argument of the wrong type (not a tensor, not a
    number); a :class:`KernelArgumentError` that is also a ``TypeError``."""


class OutOfBoundsError(TileLangError, IndexError):
    """A kernel run on the CPU backend indexed a buffer outside its shape (nothing was read or
    written there); the message names the kernel, the buffer, the index, the shape and the
    user's source line.  ``pass_configs={"tl.disable_bounds_check": True}`` turns the checks
    off."""


class DivisionByZeroError(TileLangError, ZeroDivisionError):
    """A kernel run on the CPU backend divided an integer by zero (or took its remainder);
    the message names the kernel and the user's source line.  The quotient is taken as 0 and
    the kernel runs on; CUDA gives an unspecified value."""


def source_location(span: Any) -> str | None:
    """``"at FILE:LINE: <source line>"`` for a TVMScript ``Span``, or ``None`` without one."""
    spans = getattr(span, "spans", None)  # a SequentialSpan: the innermost scope is last
    if spans:
        span = spans[-1]
    name = getattr(getattr(span, "source_name", None), "name", None)
    line = getattr(span, "line", 0)
    if not name or not line or line < 1:
        return None
    text = linecache.getline(name, line).strip()
    return f"at {name}:{line}: {text}" if text else f"at {name}:{line}"
