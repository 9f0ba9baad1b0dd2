"""Integer helpers for choosing tile sizes on the host (plain Python ints)."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """``a / b`` rounded up, for non-negative ``a`` and positive ``b``."""
    return (a + b - 1) // b


def next_power_of_2(n: int) -> int:
    """The smallest power of two that is at least ``n`` (1 for ``n <= 1``)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def prev_power_of_2(n: int) -> int:
    """The largest power of two that is at most ``n`` (``n >= 1``)."""
    if n < 1:
        raise ValueError(f"prev_power_of_2 needs n >= 1, got {n}")
    return 1 << (int(n).bit_length() - 1)


__all__ = ["cdiv", "next_power_of_2", "prev_power_of_2"]
