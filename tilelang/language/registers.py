"""Register control for warp-specialized kernels (sm_90a), with the public TileLang's names.

``T.set_max_nreg(n, is_inc)`` sets the per-thread register limit of the warp group that runs
it (inside ``T.ws``); ``T.annotate_producer_reg_dealloc(n)`` / ``T.annotate_consumer_reg_alloc(n)``
choose the numbers automatic warp specialization uses (defaults 24 and 240) for the kernel
they are written in; ``T.disable_warp_group_reg_alloc()`` turns the rebalancing off for it.
"""

from __future__ import annotations

from ..device import registers
from ..errors import DSLError, LoweringError


def _count(n, what: str) -> int:
    try:
        return registers.check_count(n, what)
    except LoweringError as err:
        raise DSLError(str(err)) from None


def set_max_nreg(reg_count: int, is_inc: int | bool):
    """``setmaxnreg``: the executing warp group's per-thread register limit becomes
    ``reg_count`` (a multiple of 8 in 24..256): raised when ``is_inc`` (waiting until the
    block's pool has the registers), else lowered (returning them to the pool).  Every thread
    of the warp group must execute it.  A kernel that uses it gets no automatic
    warp specialization."""
    if is_inc not in (0, 1, True, False):
        raise DSLError(f"T.set_max_nreg: is_inc is 0/1 or a bool, got {is_inc!r}")
    return registers.setmaxnreg(_count(reg_count, "T.set_max_nreg"), bool(is_inc))


def annotate_producer_reg_dealloc(reg_count: int = 24):
    """The register limit automatic warp specialization gives this kernel's producer warp
    group (``setmaxnreg.dec``)."""
    return registers.register_hint(registers.PRODUCER,
                                   _count(reg_count, "T.annotate_producer_reg_dealloc"))


def annotate_consumer_reg_alloc(reg_count: int = 240):
    """The register limit automatic warp specialization gives each of this kernel's consumer
    warp groups (``setmaxnreg.inc``)."""
    return registers.register_hint(registers.CONSUMER,
                                   _count(reg_count, "T.annotate_consumer_reg_alloc"))


def disable_warp_group_reg_alloc():
    """Automatic warp specialization of this kernel keeps every warp group's registers as
    launched: no ``setmaxnreg``."""
    return registers.register_hint(registers.NO_REBALANCE, 0)
