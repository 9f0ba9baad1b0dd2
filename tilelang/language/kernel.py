"""``T.Kernel``: the launch of a grid of blocks, each of ``threads`` threads.

Inside the ``with`` body the block indices (``bx, by, bz``) are bound; tile operators act on
the whole block.  The IR keeps the launch as ``thread_extent`` attributes, which each target's
``LowerKernelLaunch`` pass turns into a GPU launch or a loop over blocks on the CPU.

``T.ClusterKernel`` (or ``T.Kernel(..., cluster_dims=...)``) groups the blocks into thread
block clusters (CUDA sm_90 and newer): the cluster shape is kept as ``clusterCtaIdx.{x,y,z}``
thread extents, which TVM's host/device split hands to the launch.
"""

from __future__ import annotations

from typing import Any, Sequence

import tvm_ffi
from tvm import tirx
from tvm.script import tirx as _T
from tvm.script.ir_builder import IRBuilder

from ..errors import DSLError, DSLTypeError
from .extent import positive_extent

_BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
_THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")

_CLUSTER_TAGS = ("clusterCtaIdx.x", "clusterCtaIdx.y", "clusterCtaIdx.z")
MAX_CLUSTER_BLOCKS = 16  # the largest (non-portable) cluster of sm_90; 8 is portable

_stack: list["Kernel"] = []


class Kernel:
    """``with T.Kernel(gx[, gy[, gz]], threads=128 | (tx, ty, tz), prelude=None) as (bx, ...)``.
    Without grid sizes the kernel is one block (``T.Kernel(threads=32)``).

    Grid sizes and thread counts are positive integers or integer expressions; anything else
    raises :class:`DSLTypeError` (wrong type) or :class:`DSLError` (below 1).

    ``cluster_dims=(cx, cy, cz)`` (or an int for ``(cx, 1, 1)``) launches the blocks in thread
    block clusters of that shape (see :func:`ClusterKernel`)."""

    def __init__(self, *grid: Any, threads: int | Sequence[int] | None = 128,
                 prelude: str | None = None, is_cpu: bool = False,
                 cluster_dims: int | Sequence[int] | None = None):
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
        for t in threads:
            if not isinstance(t, (int, tirx.IntImm)):
                raise DSLTypeError(f"T.Kernel: threads must be constant ints (a block's size "
                                   f"is fixed when the kernel is compiled), got {t}")
        self.threads = threads
        self.prelude = prelude
        self.cluster = _cluster_shape(cluster_dims, self.grid)
        self._frames: list = []
        self.block_vars: list = []
        self.thread_vars: list = []
        self.launched: dict = {}  # launch tag -> (index var, extent)
        # whether the program has read a raw thread index (a SIMT-style kernel, whose scalar
        # statements every thread runs for itself: see T.atomic_add)
        self.reads_thread_index = False

    def __enter__(self):
        if _stack:
            raise DSLError("T.Kernel inside a T.Kernel: kernels do not nest (give the outer "
                           "kernel's grid more dimensions, or write two kernels)")
        for tag, ext in zip(_BLOCK_TAGS, self.grid):
            f = _T.launch_thread(tag, ext)
            self.block_vars.append(f.__enter__())
            self.launched[tag] = (self.block_vars[-1], ext)
            self._frames.append(f)
        if any(c > 1 for c in self.cluster):
            for tag, ext in zip(_CLUSTER_TAGS, self.cluster):
                if ext > 1:
                    f = _T.launch_thread(tag, ext)
                    f.__enter__()
                    self._frames.append(f)
        for name, tag, ext in zip(("tx", "ty", "tz"), _THREAD_TAGS, self.threads):
            f = _T.launch_thread(tag, ext)
            v = f.__enter__()
            IRBuilder.name(name, v)
            self.thread_vars.append(v)
            self.launched[tag] = (v, ext)
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


def ClusterKernel(*grid: Any, cluster_dims: int | Sequence[int],
                  threads: int | Sequence[int] | None = None, prelude: str | None = None,
                  is_cpu: bool = False) -> Kernel:
    """``with T.ClusterKernel(gx[, gy[, gz]], cluster_dims=(cx, cy, cz), threads=...) as
    (bx, ...)``: a :class:`Kernel` whose blocks run in thread block clusters of ``cx x cy x
    cz`` blocks (CUDA sm_90 and newer).  The blocks of a cluster run at the same time and can
    synchronize (``T.cluster_sync``) and arrive on each other's barriers
    (``T.mbarrier_arrive(bar, cta_id)``); ``T.block_rank_in_cluster()`` numbers them.  Block
    indices keep their meaning (the grid counts blocks, not clusters); each grid size must be
    a multiple of the cluster's size along it, and a cluster has at most 16 blocks."""
    return Kernel(*grid, threads=threads, prelude=prelude, is_cpu=is_cpu,
                  cluster_dims=cluster_dims)


def _cluster_shape(cluster_dims: Any, grid: list) -> tuple[int, int, int]:
    """``cluster_dims`` as three positive ints, checked against the grid where it is known."""
    op = "T.ClusterKernel"
    if cluster_dims is None:
        return (1, 1, 1)
    dims = list(cluster_dims) if isinstance(cluster_dims, (list, tuple)) else [cluster_dims]
    dims = [int(d.value) if isinstance(d, tirx.IntImm) else d for d in dims]
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1
                                      for d in dims):
        raise DSLError(f"{op}: cluster_dims must be a positive int or a tuple of 1 to 3 "
                       f"positive ints, got {cluster_dims!r}")
    dims += [1] * (3 - len(dims))
    size = dims[0] * dims[1] * dims[2]
    if size > MAX_CLUSTER_BLOCKS:
        raise DSLError(f"{op}: a cluster of {dims[0]}x{dims[1]}x{dims[2]} = {size} blocks is "
                       f"larger than the {MAX_CLUSTER_BLOCKS} blocks a cluster may have")
    for d, (c, g) in enumerate(zip(dims, list(grid) + [1] * (3 - len(grid)))):
        if c == 1:
            continue
        if isinstance(g, tirx.IntImm):
            g = int(g.value)
        if isinstance(g, int) and g % c:
            raise DSLError(f"{op}: grid dimension {d} has {g} blocks, not a multiple of the "
                           f"cluster's {c} blocks along it (cluster_dims={tuple(dims)})")
    return tuple(dims)


def _current(op: str) -> Kernel:
    if not _stack:
        raise DSLError(f"{op} is only valid inside a T.Kernel block")
    return _stack[-1]


def launch_thread(thread: Any, extent: Any):
    """``T.launch_thread(tag, extent)``: inside a :class:`Kernel` that launched ``tag``
    (``"threadIdx.x"``, ``"blockIdx.y"`` ...) already, that index itself (the extent must
    agree); otherwise a new launch attribute, as in TVMScript."""
    if _stack and isinstance(thread, str) and thread in _stack[-1].launched:
        k = _stack[-1]
        var, ext = k.launched[thread]
        same = extent == ext if isinstance(extent, int) and isinstance(ext, int) else \
            tvm_ffi.structural_equal(tirx.const(extent, "int32") if isinstance(extent, int)
                                     else extent,
                                     tirx.const(ext, "int32") if isinstance(ext, int) else ext)
        if not same:
            raise DSLError(f"T.launch_thread({thread!r}, {extent}): the kernel launched "
                           f"{thread} with extent {ext}")
        if thread.startswith("threadIdx"):
            k.reads_thread_index = True
        return var
    return _T.launch_thread(thread, extent)


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
