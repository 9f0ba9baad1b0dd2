"""``T.ws``: run a region of a kernel on one thread group (warp specialization); and
``T.wait_wgmma(n)``, the explicit wait for a warp group's wgmma groups.

``with T.ws(0): ...`` runs its body on warp group 0 (threads 0..127) only, ``T.ws(1)`` on
threads 128..255, ``T.ws(0, 1)`` on threads 0..255.  Tile operators inside distribute their
work over the group's threads; ``tx`` keeps its value (the block's ``threadIdx.x``).  Shared
tiles handed from one group to another are synchronized by a named barrier over exactly the
threads of both groups (see docs/passes.md, "Thread groups").  CUDA only.
"""

from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as _T

from ..device.thread_group import GROUP_ATTR, warp_groups
from ..errors import DSLError
from .kernel import _current


class ws:
    """``with T.ws(*warp_group_ids):`` the body runs on those (consecutive) warp groups."""

    def __init__(self, *warp_group_ids: int):
        if not warp_group_ids:
            raise DSLError("T.ws needs at least one warp group id")
        for i in warp_group_ids:
            if isinstance(i, bool) or not isinstance(i, int) or i < 0:
                raise DSLError(f"T.ws: a warp group id is a non-negative int, got {i!r}")
        self.ids = tuple(warp_group_ids)
        self._frames: list = []

    def __enter__(self):
        k = _current("T.ws")
        if len(k.threads) != 1:
            raise DSLError("T.ws needs a 1-D block of threads (T.Kernel(..., threads=n))")
        try:
            g = warp_groups(self.ids, k.num_threads)
        except ValueError as err:
            raise DSLError(f"T.ws{self.ids}: {err}") from None
        tx = k.thread_vars[0]
        cond = tirx.And(tx >= g.offset, tx < g.end) if g.offset else tx < g.end
        for f in (_T.attr(tirx.const(g.count, "int32"), GROUP_ATTR, tirx.const(g.offset, "int32")),
                  _T.If(cond), _T.Then()):
            f.__enter__()
            self._frames.append(f)
        return None

    def __exit__(self, *exc):
        for f in reversed(self._frames):
            f.__exit__(*exc)
        self._frames = []
        return None


def wait_wgmma(pending: int) -> tirx.Call:
    """``wgmma.wait_group pending``: wait until at most ``pending`` of this warp group's wgmma
    groups (``T.gemm(..., wg_wait=-1)`` and the like) are still in flight.  The compiler also
    waits by itself before any use of a gemm's results, so this only moves a wait earlier."""
    from ..device import wgmma

    if isinstance(pending, bool) or not isinstance(pending, int) or not 0 <= pending <= 7:
        raise DSLError(f"T.wait_wgmma: pending is an int in 0..7, got {pending!r}")
    return wgmma.wait(pending)
