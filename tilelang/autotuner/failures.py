"""Why a candidate configuration was skipped: a ``Failure`` names the configuration, one of
the fixed reasons below, and the error's message."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LoweringError, TileLangError

COMPILE_ERROR = "compile error"
SHARED_MEMORY = "shared memory exceeded"
TIMEOUT = "timeout"
WRONG_RESULT = "wrong result"
RUNTIME_ERROR = "runtime error"
INVALID_CONFIG = "invalid config"
REASONS = (COMPILE_ERROR, SHARED_MEMORY, TIMEOUT, WRONG_RESULT, RUNTIME_ERROR, INVALID_CONFIG)


class CandidateTimeout(TimeoutError):
    """A candidate's compile, check or timing ran past the tuner's ``timeout``."""


class CandidateRuntimeError(RuntimeError):
    """A candidate's kernel raised while it was checked or timed (the cause is chained)."""


@dataclass
class Failure:
    """A configuration the tuner skipped: ``reason`` is one of ``REASONS``, ``message`` the
    error (its first line is what the summary shows)."""

    config: dict
    reason: str
    message: str

    @property
    def summary(self) -> str:
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.config}: {self.reason}: {first}"

    def __str__(self) -> str:
        return self.summary


def compile_reason(err: BaseException) -> str:
    """The reason for an error raised while compiling a candidate's program."""
    if isinstance(err, CandidateTimeout):
        return TIMEOUT
    if isinstance(err, LoweringError) and _is_shared_memory_error(err):
        return SHARED_MEMORY
    return COMPILE_ERROR


def _is_shared_memory_error(err: LoweringError) -> bool:
    # tilelang/transform/plan_shared_memory.py raises a plain LoweringError for this; its
    # message is the only mark (a dedicated subclass in tilelang/errors.py would be better).
    return "bytes of shared memory" in str(err)


def is_candidate_error(err: BaseException) -> bool:
    """Whether an error raised while building a candidate's program means "this configuration
    does not work" (tilelang's own errors, the function's own ``assert``/``ValueError`` on the
    values) rather than a mistake in the user's code (``TypeError``, ``NameError``, ...)."""
    if isinstance(err, TileLangError):
        return True
    return isinstance(err, (AssertionError, ValueError)) and not isinstance(err, TypeError)


def message_of(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


__all__ = ["CandidateRuntimeError", "CandidateTimeout", "Failure", "REASONS", "compile_reason",
           "is_candidate_error", "message_of"]
