"""The atomics of the language (``T.atomic_add`` ...): the builders of ``tilelang.ops.atomic``,
told whether the enclosing kernel is SIMT-style.  A kernel that has read a raw thread index
(``T.get_thread_binding``) runs its scalar statements on every thread, as CUDA does, so an
element atomic outside ``T.Parallel`` is then every thread's own; otherwise it is made once
per block, as on the CPU."""

from __future__ import annotations

from typing import Any

from ..ops import atomic as _ops
from .kernel import _stack


def _simt() -> bool:
    return bool(_stack) and _stack[-1].reads_thread_index


def atomic_add(dst: Any, value: Any, memory_order: str | None = None,
               return_prev: bool = False, use_tma: bool = False):
    """``dst += value`` atomically (element or region); ``return_prev=True``: the element's
    value before the add (an expression).  ``use_tma`` is accepted; atomics make the add."""
    return _ops.atomic_add(dst, value, memory_order, return_prev, use_tma, _simt())


def atomic_max(dst: Any, value: Any, memory_order: str | None = None,
               return_prev: bool = False):
    """``dst = max(dst, value)`` atomically (element or region)."""
    return _ops.atomic_max(dst, value, memory_order, return_prev, _simt())


def atomic_min(dst: Any, value: Any, memory_order: str | None = None,
               return_prev: bool = False):
    """``dst = min(dst, value)`` atomically (element or region)."""
    return _ops.atomic_min(dst, value, memory_order, return_prev, _simt())


def atomic_or(dst: Any, value: Any, memory_order: str | None = None,
              return_prev: bool = False):
    """``dst |= value`` atomically (integer element or region)."""
    return _ops.atomic_or(dst, value, memory_order, return_prev, _simt())


def atomic_and(dst: Any, value: Any, memory_order: str | None = None,
               return_prev: bool = False):
    """``dst &= value`` atomically (integer element or region)."""
    return _ops.atomic_and(dst, value, memory_order, return_prev, _simt())


def atomic_xor(dst: Any, value: Any, memory_order: str | None = None,
               return_prev: bool = False):
    """``dst ^= value`` atomically (integer element or region)."""
    return _ops.atomic_xor(dst, value, memory_order, return_prev, _simt())


def atomic_addx2(dst: Any, value: Any, return_prev: bool = False,
                 memory_order: str | None = None):
    """``dst[..., j:j+2] += value[..., j:j+2]`` atomically (packed where the hardware can);
    ``return_prev=True``: the two previous values (a vector to store into a 2-element slice)."""
    return _ops.atomic_addx2(dst, value, return_prev, memory_order, _simt())


def atomic_addx4(dst: Any, value: Any, return_prev: bool = False,
                 memory_order: str | None = None):
    """``dst[..., j:j+4] += value[..., j:j+4]`` atomically (packed where the hardware can)."""
    return _ops.atomic_addx4(dst, value, return_prev, memory_order, _simt())


def atomic_load(src: Any, memory_order: str = "seq_cst"):
    """The value of element ``src``, read atomically with ``memory_order``."""
    return _ops.atomic_load(src, memory_order)


def atomic_store(dst: Any, src: Any, memory_order: str = "seq_cst"):
    """``dst = src``, stored atomically with ``memory_order``."""
    return _ops.atomic_store(dst, src, memory_order, _simt())
