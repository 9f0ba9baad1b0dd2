"""Per-thread random numbers: ``T.rng_init``, ``T.rng_rand``, ``T.rng_rand_float``.

Each thread owns one counter-based generator state, as with cuRAND's device API:
``T.rng_init(seed, seq, off)`` positions it at element ``off`` of subsequence ``seq`` of the
stream of ``seed``; every ``T.rng_rand()`` / ``T.rng_rand_float()`` the thread runs draws the
next values of its own stream, in the order the thread runs them.  The default generator,
``"curandStatePhilox4_32_10_t"``, gives cuRAND's (and Triton's ``tl.randint4x``) Philox4x32-10
stream bit for bit on every target; see :mod:`tilelang.device.random`.
"""

from __future__ import annotations

from typing import Any

from tvm import tirx

from ..device import random as rng
from ..errors import DSLError, DSLTypeError
from ..ops.loops import dtype_of
from .kernel import _current

GENERATORS = rng.GENERATORS


def _u64(value: Any, op: str, what: str) -> tirx.PrimExpr:
    if isinstance(value, bool) or not isinstance(value, (int, tirx.PrimExpr)):
        raise DSLTypeError(f"{op}: {what} must be an integer (a Python int or an integer "
                           f"expression), got {value!r}")
    if isinstance(value, int):
        if not 0 <= value < 2**64:
            raise DSLError(f"{op}: {what} {value} is not an unsigned 64-bit integer")
        return tirx.const(value, "uint64")
    if not dtype_of(value).startswith(("int", "uint")):
        raise DSLTypeError(f"{op}: {what} must be an integer expression, got {value} of type "
                           f"{dtype_of(value)}")
    return tirx.Cast("uint64", value)


def _default_sequence(op: str) -> tirx.PrimExpr:
    """The thread's position in the whole launch (x fastest: thread x, y, z, then block x,
    y, z), so that every thread of the grid gets a subsequence of its own."""
    k = _current(op)
    k.reads_thread_index = True
    dims = list(zip(k.block_vars, k.grid))[::-1] + list(zip(k.thread_vars, k.threads))[::-1]
    seq = tirx.const(0, "uint64")
    for var, extent in dims:
        seq = seq * tirx.Cast("uint64", extent) + tirx.Cast("uint64", var)
    return seq


def rng_init(seed: Any, seq: Any = None, off: Any = 0,
             generator: str = "curandStatePhilox4_32_10_t") -> tirx.PrimExpr:
    """Start this thread's generator at element ``off`` of subsequence ``seq`` of ``seed``'s
    stream (cuRAND's ``curand_init(seed, seq, off, &state)``).  ``seq`` defaults to the
    thread's index in the whole grid.  ``generator`` is one of ``GENERATORS``."""
    op = "T.rng_init"
    _current(op)
    if generator not in GENERATORS:
        raise DSLError(f"{op}: unknown generator {generator!r}; one of {', '.join(GENERATORS)}")
    seq = _default_sequence(op) if seq is None else _u64(seq, op, "seq")
    return rng.init_call(_u64(seed, op, "seed"), seq, _u64(off, op, "off"), generator)


def rng_rand() -> tirx.PrimExpr:
    """The next 32-bit unsigned integer of this thread's stream (``curand(&state)``)."""
    _current("T.rng_rand")
    return rng.rand_call()


def rng_rand_float(bit: int = 32, dist: str = "uniform") -> tirx.PrimExpr:
    """The next float of this thread's stream: ``bit`` 32 (``float32``) or 64 (``float64``),
    ``dist`` ``"uniform"`` (in (0, 1], ``curand_uniform[_double]``) or ``"normal"`` (standard
    normal, Box-Muller, ``curand_normal[_double]``; each pair of draws gives two values)."""
    op = "T.rng_rand_float"
    _current(op)
    if bit not in (32, 64) or isinstance(bit, bool):
        raise DSLError(f"{op}: bit must be 32 or 64, got {bit!r}")
    if dist not in ("uniform", "normal"):
        raise DSLError(f"{op}: dist must be 'uniform' or 'normal', got {dist!r}")
    return rng.float_call(bit, dist)


__all__ = ["rng_init", "rng_rand", "rng_rand_float"]
