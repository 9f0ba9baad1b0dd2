"""The exceptions tilelang raises, so that callers can tell misuse from compiler failure."""

from __future__ import annotations


class TileLangError(Exception):
    """Base class of every error tilelang raises on purpose."""


class DSLError(TileLangError, ValueError):
    """A kernel program misuses the language: a tile operator got regions of the wrong shape,
    an unknown dtype, a dimension that does not exist.  The message names the op, the buffers
    and the user's source line."""


class TileOpError(DSLError):
    """Raised by a tile-operator builder while the program is parsed; the parser adds the
    source line and re-raises it as a :class:`DSLError`."""


class LoweringError(TileLangError):
    """A pass could not lower a program for the chosen target (unsupported feature)."""


class CompileError(TileLangError):
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
