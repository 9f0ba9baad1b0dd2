"""Keyword arguments of the public TileLang that are scheduling hints here.

``annotations={...}`` on loops and tile operators and ``prefer_async=True`` ask a pass for a
particular instruction or schedule; they never change results, and this compiler picks its
own (docs/compatibility.md).  They are checked for type, then dropped."""

from __future__ import annotations

from typing import Any

from ..errors import DSLError


def check_hints(op: str, annotations: Any = None, prefer_async: Any = False) -> None:
    """Raise :class:`DSLError` naming ``op`` for hints of the wrong type."""
    if annotations is not None and not isinstance(annotations, dict):
        raise DSLError(f"{op}: annotations must be a dict, got {type(annotations).__name__}")
    if not isinstance(prefer_async, bool):
        raise DSLError(f"{op}: prefer_async must be True or False, got {prefer_async!r}")


def refuse(op: str, name: str, value: Any, why: str) -> None:
    """Raise :class:`DSLError` for a keyword whose value would change what the program does
    and that this compiler cannot honour."""
    if value is not None:
        raise DSLError(f"{op}: {name}={value!r} is not supported here ({why})")
