"""``T.finalize_reducer`` (with ``T.alloc_reducer`` in ``tilelang.language.reducer``): a reduction whose contributions each thread
accumulates in a copy of its own, combined across the threads at the finalize.

``alloc_reducer(shape, dtype, op, replication="all")`` (also the default) gives every thread
of the block its own copy of the whole buffer (a per-thread ``local`` array).  ``T.fill`` /
``T.clear`` starts an epoch in every copy; ``reducer[i] += x`` (``op="sum"``) or
``reducer[i] = T.max(reducer[i], x)`` inside ``T.Parallel`` then updates the running thread's
copy only, so the loop keeps whatever thread layout its other operands give it;
``T.finalize_reducer(reducer)`` combines the copies element-wise with ``op`` over the threads
of the block (or of the ``T.ws`` group it runs in) and leaves the result in every copy.  The
CPU runs a block on one thread, so its single copy already holds the result and the finalize
does nothing there.  ``replication="none"`` gives an ordinary fragment, each element held by
the threads its layout says; updates must then be made by those threads (as any fragment
write), and the finalize has nothing to combine.
"""

from __future__ import annotations

from tvm import tirx

from ..device import atomics as device
from ..errors import LoweringError
from . import region as R
from .base import LowerContext, TileOp, register

OPS = ("sum", "max", "min")
_COMBINE = {"sum": "tl::SumOp", "max": "tl::MaxOp", "min": "tl::MinOp"}


@register
class FinalizeReducer(TileOp):
    """Combine every thread's copy of ``reducer`` with ``kind``; the result in every copy."""

    name = "tl.finalize_reducer"
    printer = "finalize_reducer"
    fields = ("reducer", "kind")


def finalize(reducer, kind: str):
    """The ``tl.finalize_reducer`` call of ``reducer`` (a buffer) combining with ``kind``."""
    return FinalizeReducer(reducer=R.full_region(reducer), kind=kind).to_call()


@FinalizeReducer.lowering("cpu")
def _finalize_cpu(op: FinalizeReducer, ctx: LowerContext) -> tirx.Stmt:
    """One thread per block: its copy already holds every contribution."""
    return tirx.Evaluate(tirx.const(0, "int32"))


@FinalizeReducer.lowering("cuda")
def _finalize_cuda(op: FinalizeReducer, ctx: LowerContext) -> tirx.Stmt:
    """Lanes combine by shuffles, warps through a shared scratch of one partial array per
    warp (``tl::all_reduce_array``); every thread of the group must reach it."""
    buf = R.buffer_of(op.reducer)
    if buf.scope() == "local.fragment":  # replication="none": one holder (or equal replicas)
        return tirx.Evaluate(tirx.const(0, "int32"))
    n = 1
    for s in buf.shape:
        if R.as_int(s) is None:
            raise LoweringError(f"T.finalize_reducer: reducer {buf.name} needs a constant shape "
                                f"on CUDA, got {R.fmt_shape(buf.shape)}")
        n *= R.as_int(s)
    threads = ctx.num_threads
    if not (threads % 32 == 0 or (threads <= 32 and threads & (threads - 1) == 0)):
        raise LoweringError(f"T.finalize_reducer: combining over {threads} threads needs whole "
                            "warps or a power of two up to 32")
    zero = [tirx.const(0, "int32")] * len(buf.shape)
    vals = tirx.address_of(tirx.BufferLoad(buf, zero))
    stmts = []
    scratch_ptr = vals  # unused below a warp
    if threads > 32:
        scratch = tirx.decl_buffer([threads // 32 * n], buf.dtype, f"{buf.name}_red",
                                   scope="shared.dyn")
        stmts.append(tirx.AllocBuffer(scratch))
        scratch_ptr = tirx.address_of(tirx.BufferLoad(scratch, [tirx.const(0, "int32")]))
    offset, barrier = 0, 0
    if ctx.barriers is not None and ctx.group != ctx.barriers.block:
        offset, barrier = ctx.group.offset, ctx.barriers.of(ctx.group)
    targs = f"{_COMBINE[op.kind]}, {n}, {threads}, {offset}, {barrier}"
    stmts.append(tirx.Evaluate(device.all_reduce_array(targs, vals, scratch_ptr)))
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)
