"""``T.Kernel``: the launch of a grid of blocks, each of ``threads`` threads.

Inside the ``with`` body the block indices (``bx, by, bz``) are bound; tile operators act on
the whole block.  The IR keeps the launch as ``thread_extent`` attributes, which each target's
``LowerKernelLaunch`` pass turns into a GPU launch or a loop over blocks on the CPU.
"""

from __future__ import annotations

from typing import Any, Sequence

from tvm.script import tirx as _T
from tvm.script.ir_builder import IRBuilder

from ..errors import DSLError
from .extent import positive_extent

_BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")

_stack: list["Kernel"] = []


class Kernel:
    """``with T.Kernel(gx[, gy[, gz]], threads=128 | (tx, ty, tz), prelude=None) as (bx, ...)``.
    Without grid sizes the kernel is one block (``T.Kernel(threads=32)``).

    Grid sizes and thread counts are positive integers or integer expressions; anything else
    raises :class:`DSLTypeError` (wrong type) or :class:`DSLError` (below 1)."""

    def __init__(self, *grid: Any, threads: int | Sequence[int] | None = 128,
                 prelude: str | None = None, is_cpu: bool = False):
        if len(grid) > 3:
            raise DSLError(f"T.Kernel takes at most 3 grid dimensions, got {len(grid)}")
        grid = grid or (1,)  # no grid: one block
        self.grid = [positive_extent(g, "T.Kernel", f"grid dimension {d}")
                     for d, g in enumerate(grid)]
        if threads is None:
            threads = 128
        if not isinstance(threads, (list, tuple)):
            threads = [threads]
        if not 1 <= len(threads) <= 3:
            raise DSLError(f"T.Kernel: threads must be a positive int or a tuple of 1 to 3, "
                           f"got {threads}")
        threads = [positive_extent(t, "T.Kernel", "threads" if len(threads) == 1
                                   else f"threads[{d}]") for d, t in enumerate(threads)]
        self.threads = threads
        self.prelude = prelude
        self._frames: list = []
        self.block_vars: list = []
        self.thread_vars: list = []
        # whether the program has read a raw thread index (a SIMT-style kernel, whose scalar
        # statements every thread runs for itself: see T.atomic_add)
        self.reads_thread_index = False

    def __enter__(self):
        for tag, ext in zip(_BLOCK_TAGS, self.grid):
            f = _T.launch_thread(tag, ext)
            self.block_vars.append(f.__enter__())
            self._frames.append(f)
        for name, tag, ext in zip(("tx", "ty", "tz"), _THREAD_TAGS, self.threads):
            f = _T.launch_thread(tag, ext)
            v = f.__enter__()
            IRBuilder.name(name, v)
            self.thread_vars.append(v)
            self._frames.append(f)
        if self.prelude:
            f = _T.attr(0, "tl.prelude", self.prelude)
            f.__enter__()
            self._frames.append(f)
        _stack.append(self)
        return self.block_vars[0] if len(self.block_vars) == 1 else tuple(self.block_vars)

    def __exit__(self, *exc):
        _stack.pop()
        for f in reversed(self._frames):
            f.__exit__(*exc)
        return None

    @property
    def num_threads(self) -> int:
        n = 1
        for t in self.threads:
            n *= int(t)
        return n


def _current(op: str) -> Kernel:
    if not _stack:
        raise DSLError(f"{op} is only valid inside a T.Kernel block")
    return _stack[-1]


def get_thread_binding(dim: int = 0):
    """The raw thread index along ``dim`` (``threadIdx.x`` for 0)."""
    k = _current("T.get_thread_binding")
    if not 0 <= dim < len(k.thread_vars):
        raise DSLError(f"T.get_thread_binding: the kernel has {len(k.thread_vars)} thread dims, "
                       f"no dim {dim}")
    k.reads_thread_index = True
    return k.thread_vars[dim]


def get_thread_bindings():
    k = _current("T.get_thread_bindings")
    k.reads_thread_index = True
    return list(k.thread_vars)


def get_block_binding(dim: int = 0):
    """The block index along ``dim`` (``blockIdx.x`` for 0)."""
    k = _current("T.get_block_binding")
    if not 0 <= dim < len(k.block_vars):
        raise DSLError(f"T.get_block_binding: the grid has {len(k.block_vars)} dims, no dim {dim}")
    return k.block_vars[dim]


def get_block_bindings():
    return list(_current("T.get_block_bindings").block_vars)
