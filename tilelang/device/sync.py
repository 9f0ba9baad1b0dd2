"""Synchronizations beyond the block barrier: the named barriers a program writes
(``barrier.sync id, count``, the id a constant or computed at run time), a producer's arrival on a named barrier without waiting
(``barrier.arrive id, count``), and the barrier of the whole grid (cooperative groups).

The named-barrier forms are helpers of ``src/tl_templates/cuda/sync.h``.  The grid barrier is
``cooperative_groups::this_grid().sync()``: every thread of every block of the launch waits
for all others, and their memory writes before it are visible after it; it is only valid in a
kernel launched cooperatively (all blocks resident at once), which :func:`cooperative` marks.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.backend.cuda.op import cuda_func_call

from ..ir_utils import StmtMutator
from .effects import Effect, Sync, call, device_op_of, register_device_op

def _emit_sync_partial(c):
    return tirx.call_extern("int32", "tl::__sync_thread_partial", *c.args)


# a named barrier the program wrote (T.sync_threads(id, count)) with constant id and count:
# the effect of the compiler's own group barriers (sync insertion counts it), printed as the
# header helper the public TileLang's programs expect
SYNC_NAMED = register_device_op(
    "tl.device.sync_threads_named", Effect(sync=Sync(barrier_arg=0, count_arg=1)),
    _emit_sync_partial,
    "barrier.sync id, count written by the program: the `count` threads that reach barrier "
    "`id` wait for each other")

SYNC_PARTIAL = register_device_op(
    "tl.device.sync_threads_partial", Effect(), _emit_sync_partial,
    "barrier.sync id, count with an id (or count) known at run time only: the `count` "
    "threads that reach barrier `id` wait for each other (sync insertion cannot tell which "
    "group it orders, so it counts it as no barrier)")

NAMED_BARRIER_ARRIVE = register_device_op(
    "tl.device.named_barrier_arrive", Effect(),
    lambda c: tirx.call_extern("int32", "tl::__named_barrier_arrive", *c.args),
    "barrier.arrive id, count: count this thread towards named barrier `id` of `count` "
    "threads without waiting")

GRID_SYNC = register_device_op(
    "tl.device.grid_sync", Effect(sync=Sync()),
    lambda c: cuda_func_call("cooperative_groups::this_grid().sync",
                             source_code="#include <cooperative_groups.h>\n"),
    "cooperative_groups::this_grid().sync(): all threads of the grid wait for each other "
    "(needs a cooperative launch)")

# the key of the function attribute through which TVM's host/device split asks the runtime
# for a cooperative launch (cuLaunchCooperativeKernel) of the function's kernels
LAUNCH_PARAMS = "tirx.kernel_launch_params"
COOPERATIVE = "tirx.use_cooperative_launch"


def sync_partial(barrier_id, count) -> tirx.Call:
    """A named barrier; constant ``barrier_id`` and ``count`` give one that sync insertion
    counts as a barrier of its group."""
    if isinstance(barrier_id, int) and isinstance(count, int):
        return call(SYNC_NAMED, barrier_id, count)
    return call(SYNC_PARTIAL, barrier_id, count)


def named_barrier_arrive(barrier_id, count) -> tirx.Call:
    return call(NAMED_BARRIER_ARRIVE, barrier_id, count)


def grid_sync() -> tirx.Call:
    return call(GRID_SYNC)


def uses_grid_sync(stmt: tirx.Stmt) -> bool:
    found = []

    def on_call(c):
        if device_op_of(c) is GRID_SYNC:
            found.append(c)

    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, on_call))
    return bool(found)


def cooperative(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with its kernels launched cooperatively (all blocks resident at once, so that
    a grid barrier can complete).  The launch fails when the grid does not fit on the GPU."""
    params = list(func.attrs.get(LAUNCH_PARAMS, [])) if func.attrs else []
    if COOPERATIVE in params:
        return func
    return func.with_attr(LAUNCH_PARAMS, params + [COOPERATIVE])


class _DropBlockLocal(StmtMutator):
    def visit_Evaluate(self, s):
        if device_op_of(s) in (SYNC_PARTIAL, NAMED_BARRIER_ARRIVE):
            return tirx.Evaluate(tirx.const(0, "int32"))
        return s


def drop_block_local(stmt: tirx.Stmt) -> tirx.Stmt:
    """``stmt`` without the named-barrier syncs and arrivals (which hold already when one
    thread runs the whole block, as on the CPU)."""
    return _DropBlockLocal()(stmt)


__all__ = ["COOPERATIVE", "GRID_SYNC", "NAMED_BARRIER_ARRIVE", "SYNC_NAMED", "SYNC_PARTIAL", "cooperative",
           "drop_block_local", "grid_sync", "named_barrier_arrive", "sync_partial",
           "uses_grid_sync"]
