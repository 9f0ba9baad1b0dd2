"""``LowerKernelLaunch``: make the ``T.Kernel`` launch concrete for the target.

CPU: the whole block runs on one CPU thread, so ``threadIdx`` disappears (a program that uses
a raw thread index is rejected), ``T.Parallel`` loops run in order, shared tiles, fragments and
locals become arrays local to the block, and the grid becomes one loop over blocks that runs
in parallel over the CPU's threads (in order when the kernel contains atomics).
CUDA: the launch stays as ``thread_extent`` attributes for TVM's host/device split; a
``T.use_swizzle`` in the kernel remaps the block indices (rasterization).  A cluster shape
(``clusterCtaIdx`` extents of ``T.ClusterKernel``) reaches the launch that way too and needs
sm_90 or newer; a kernel with a grid barrier (``T.sync_grid``) makes the function's kernels
launch cooperatively (the function attribute TVM's split turns into the runtime's
``tirx.use_cooperative_launch``).  The CPU has no clusters and cannot hold a grid barrier
across its parallel block loop: kernels that use them are a ``LoweringError`` there.
Both: the threads of a kernel that draws random numbers (``T.rng_*``) get their generator
state (``tilelang.device.random``).  A function may launch several kernels: each is lowered
alone, and they run in program order.
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from ..device import cpu_form
from ..device import cluster, launch, random, sync, tma
from ..device.effects import device_op_of, effect_of
from ..engine.cuda import arch_of
from ..engine.target import is_cpu
from ..errors import LoweringError
from ..ops.annotate import MIN_BLOCKS, RASTERIZE
from ..ops.atomic import ATOMIC_MARK
from ..ops.loops import dtype_of
from ..ir_utils import (StmtMutator, find_all, launch_chain, map_kernels, rebuffer, relaunch,
                       remap_buffers, substitute, uses_var)
from .passes import function_pass, target_of

TILE_SCOPES = ("shared", "shared.dyn", "local.fragment", "local", "local.var")


class _SerialParallel(StmtMutator):
    def visit_For(self, s):
        kind = tirx.ForKind.SERIAL if s.kind == tirx.ForKind.PARALLEL else s.kind
        return tirx.For(s.loop_var, s.min, s.extent, kind, self(s.body), s.thread_binding,
                        s.annotations, s.step)


class _DropBarriers(StmtMutator):
    """A barrier among the block's threads (a device op that synchronizes a group, e.g. a
    named ``T.sync_threads(id, count)``) holds already when one CPU thread runs the block."""

    def visit_Evaluate(self, s):
        eff = effect_of(s)
        if eff is not None and eff.sync is not None and eff.sync.barrier_arg is not None:
            return tirx.Evaluate(tirx.const(0, "int32"))
        return s


class _StripAtomicMarks(StmtMutator):
    def visit_AttrStmt(self, s):
        if s.attr_key == ATOMIC_MARK:
            return self(s.body)
        return self.generic(s)


class _CPULaunch(StmtMutator):
    def visit_AttrStmt(self, s):
        if s.attr_key != "thread_extent":
            return self.generic(s)
        blocks, threads, body = [], [], s
        while isinstance(body, tirx.AttrStmt) and body.attr_key in ("thread_extent", "tl.prelude"):
            if body.attr_key == "thread_extent":
                tag = body.node.thread_tag
                (blocks if tag.startswith("blockIdx") else threads).append((body.node.var, body.value))
            body = body.body
        vmap = {}
        for var, ext in threads:
            if isinstance(ext, tirx.IntImm) and int(ext) == 1:
                vmap[var] = tirx.const(0, dtype_of(var))
            elif uses_var(body, var):
                from ..device.thread_group import GROUP_ATTR

                grouped = find_all(body, tirx.AttrStmt, lambda a: a.attr_key == GROUP_ATTR)
                why = ("splits its threads into groups (T.ws, or an if on the thread index), "
                       "which run at the same time and may wait for each other" if grouped else
                       f"reads the thread index {var.name} directly (T.get_thread_binding)")
                raise LoweringError(
                    f"the CPU backend runs each block on one thread, but the kernel {why}; "
                    "write the per-thread work with tile operators or T.Parallel")
            else:
                vmap[var] = tirx.const(0, dtype_of(var))
        body = _DropBarriers()(_SerialParallel()(body))
        atomic = bool(find_all(body, tirx.AttrStmt, lambda a: a.attr_key == ATOMIC_MARK))
        body = _StripAtomicMarks()(body)
        total = tirx.const(1, "int32")
        for _, ext in blocks:
            total = total * ext
        b = tirx.Var("block", dtype_of(blocks[0][1]) if blocks else "int32")
        stride = None
        for var, ext in blocks:
            idx = b if stride is None else tirx.floordiv(b, stride)
            vmap[var] = tirx.floormod(idx, ext) if len(blocks) > 1 else idx
            stride = ext if stride is None else stride * ext
        body = substitute(body, vmap)
        kind = tirx.ForKind.SERIAL if atomic else tirx.ForKind.PARALLEL
        return tirx.For(b, tirx.const(0, dtype_of(b)), total, kind, body)


class _Rasterize(StmtMutator):
    """CUDA: apply ``T.use_swizzle``: consecutive block ids walk a panel of ``panel`` rows
    (or columns) of tiles column by column, so neighbouring blocks share operand tiles in L2.
    In a kernel of clusters, the clusters are what walks the panels: a block keeps its place
    inside its cluster, so two blocks of a cluster that differ only along some axes keep the
    same index along the others (``WarpSpecialize`` multicasts a load that does not depend on
    the indices along some of the cluster's axes to the blocks that differ only along those)."""

    def visit_AttrStmt(self, s):
        if s.attr_key != "thread_extent" or not s.node.thread_tag.startswith("blockIdx"):
            return self.generic(s)
        chain, body = launch_chain(s)
        marks = find_all(body, tirx.AttrStmt, lambda a: a.attr_key == RASTERIZE)
        blocks = {a.node.thread_tag: (a.node.var, a.value) for a in chain
                  if a.attr_key == "thread_extent" and a.node.thread_tag.startswith("blockIdx")}
        if not marks or "blockIdx.y" not in blocks:
            return self.generic(s)
        body = _DropMarks()(body)
        shape = {a.node.thread_tag[-1]: int(a.value) for a in chain
                 if a.attr_key == "thread_extent" and a.node.thread_tag in cluster.CLUSTER_TAGS}
        (bx, gx), (by, gy) = blocks["blockIdx.x"], blocks["blockIdx.y"]
        cx, cy = shape.get("x", 1), shape.get("y", 1)
        panel = marks[0].value
        if str(marks[0].node.value) == "col":
            (bx, gx, cx), (by, gy, cy) = (by, gy, cy), (bx, gx, cx)
        if cx * cy == 1:
            qx, qy, qgx, qgy = bx, by, gx, gy
        else:  # the panels walk the grid of clusters
            qx, qy = tirx.floordiv(bx, cx), tirx.floordiv(by, cy)
            qgx, qgy = tirx.floordiv(gx, cx), tirx.floordiv(gy, cy)
        lin = qy * qgx + qx
        p = tirx.floordiv(lin, panel * qgx)
        o = tirx.floormod(lin, panel * qgx)
        h = tirx.min(panel, qgy - p * panel)
        new_y, new_x = p * panel + tirx.floormod(o, h), tirx.floordiv(o, h)
        if cx * cy > 1:
            new_y = new_y * cy + tirx.floormod(by, cy)
            new_x = new_x * cx + tirx.floormod(bx, cx)
        body = substitute(body, {by: new_y, bx: new_x})
        body = relaunch(chain, body)
        return body


class _DropMarks(StmtMutator):
    def __init__(self, key: str = RASTERIZE):
        self.key = key

    def visit_AttrStmt(self, s):
        if s.attr_key == self.key:
            return None
        return self.generic(s)


def _launch_bounds(kernel: tirx.Stmt) -> tirx.Stmt:
    """CUDA: a kernel's ``T.annotate_min_blocks_per_sm(n)`` becomes the attribute TVM's codegen
    prints as ``__launch_bounds__(threads, n)``, around the body under the launch."""
    marks = find_all(kernel, tirx.AttrStmt, lambda a: a.attr_key == MIN_BLOCKS)
    if not marks:
        return kernel
    counts = sorted({int(a.value) for a in marks})
    if len(counts) > 1:
        raise LoweringError(f"T.annotate_min_blocks_per_sm: one kernel asks for {counts} blocks "
                            "per SM; give one count")
    chain, body = launch_chain(kernel)
    body = tirx.AttrStmt(tirx.const(0, "int32"), "tirx.launch_bounds_min_blocks_per_sm",
                         tirx.const(counts[0], "int32"), _DropMarks(MIN_BLOCKS)(body))
    return relaunch(chain, body)


def _localize(buf):
    if buf.scope() in TILE_SCOPES:
        return rebuffer(buf, scope="global")
    return None


def _cluster_uses(body: tirx.Stmt) -> list[str]:
    """What in ``body`` needs thread block clusters: the cluster launches and cluster ops."""
    uses = [f"T.ClusterKernel (cluster extent {a.node.thread_tag} = {a.value})"
            for a in find_all(body, tirx.AttrStmt, lambda a: a.attr_key == "thread_extent"
                              and a.node.thread_tag in cluster.CLUSTER_TAGS)]
    if _multicast_masks(body):
        uses.append("T.tma_copy(cluster_mask=...) (TMA multicast)")
    return uses + [d.name.replace("tl.device.", "T.") for d in cluster.ops_in(body)]


def _multicast_masks(body: tirx.Stmt) -> list[int]:
    return [int(c.args[3].value) for c in find_all(
        body, tirx.Call, lambda c: device_op_of(c) is tma.TMA_LOAD_MULTICAST)]


def _check_multicast(func: tirx.PrimFunc) -> None:
    """A multicast's mask names blocks of the kernel's cluster: its cluster has more than one
    block, and no bit of the mask is at or beyond the cluster's size."""
    masks = _multicast_masks(func.body)
    if not masks:
        return
    size = 1
    for a in find_all(func.body, tirx.AttrStmt, lambda a: a.attr_key == "thread_extent"
                      and a.node.thread_tag in cluster.CLUSTER_TAGS):
        size *= int(a.value)
    for mask in masks:
        if mask >> size:
            where = ("a kernel without clusters (use T.ClusterKernel(..., cluster_dims=))"
                     if size == 1 else f"clusters of {size} blocks (ranks 0 to {size - 1})")
            raise LoweringError(f"T.tma_copy(cluster_mask={mask:#b}) names block ranks beyond "
                                f"the cluster: the kernel runs in {where}")


def _sm_version(target) -> int:
    digits = "".join(ch for ch in arch_of(target).removeprefix("sm_") if ch.isdigit())
    return int(digits) if digits else 0


@function_pass("tl.LowerKernelLaunch")
def LowerKernelLaunch(func: tirx.PrimFunc) -> tirx.PrimFunc:
    target = target_of(func)
    cpu = is_cpu(target)
    uses = _cluster_uses(func.body)
    grid_sync = sync.uses_grid_sync(func.body)
    if cpu and (uses or grid_sync):
        what = uses[0] if uses else "T.sync_grid"
        raise LoweringError(
            f"the CPU backend cannot run a kernel that uses {what}: thread block clusters and "
            "grid-wide barriers exist on CUDA GPUs only (clusters from sm_90)")
    if uses and _sm_version(target) < 90:
        raise LoweringError(f"{uses[0]} needs thread block clusters, which CUDA has from sm_90 "
                            f"on; the target is {arch_of(target)}")
    _check_multicast(func)
    # each T.Kernel's threads get their random generator states (T.rng_*)
    func = func.with_body(map_kernels(func.body, lambda k: random.lower_kernel(k, cpu)))
    if not cpu:
        if grid_sync:
            func = sync.cooperative(func)
        return func.with_body(map_kernels(_Rasterize()(func.body), _launch_bounds))
    # the CPU runs kernels one after the other: launch dependencies hold already; one thread
    # runs a block, so named barriers among its threads hold already
    body = _CPULaunch()(cpu_form.lower(sync.drop_block_local(launch.drop(func.body))))
    cpu_form.refuse_device_ops(body)
    if not any(is_buffer_var(p) for p in func.params):
        # TVM takes the device of the host's workspace allocations from the tensor arguments;
        # a kernel of only T.ptr addresses and scalars names the CPU itself
        for key, value in (("device_id", 0), ("device_type", 1)):  # kDLCPU
            body = tirx.AttrStmt(tirx.const(0, "int32"), key, tirx.const(value, "int32"), body)
    return remap_buffers(func.with_body(body), _localize)
