"""Programmatic dependent launch (sm_90+): ``tl.device.pdl_trigger`` / ``tl.device.pdl_sync``.

``pdl_trigger`` (``griddepcontrol.launch_dependents``) tells the GPU that the kernel launched
after this one may start; ``pdl_sync`` (``griddepcontrol.wait``) waits until the kernels this
one depends on have completed and their memory is visible.  Both only matter when the next
kernel is launched with programmatic stream serialization; otherwise the kernels run one after
the other and the instructions do nothing, which is also their meaning before sm_90 (the CUDA
header emits nothing there) and on the CPU (where :func:`drop` removes them).
"""

from __future__ import annotations

from tvm import tirx

from ..ir_utils import StmtMutator
from .effects import Effect, call, device_op_of, register_device_op

PDL_TRIGGER = register_device_op(
    "tl.device.pdl_trigger", Effect(),
    lambda c: tirx.call_extern("int32", "tl::pdl_trigger"),
    "griddepcontrol.launch_dependents: the dependent kernel may begin launching")

PDL_SYNC = register_device_op(
    "tl.device.pdl_sync", Effect(),
    lambda c: tirx.call_extern("int32", "tl::pdl_sync"),
    "griddepcontrol.wait: the kernels this one depends on have completed")


def trigger() -> tirx.Call:
    return call(PDL_TRIGGER)


def sync() -> tirx.Call:
    return call(PDL_SYNC)


class _Drop(StmtMutator):
    def visit_Evaluate(self, s):
        if device_op_of(s) in (PDL_TRIGGER, PDL_SYNC):
            return tirx.Evaluate(tirx.const(0, "int32"))
        return s


def drop(stmt: tirx.Stmt) -> tirx.Stmt:
    """``stmt`` without launch-dependency instructions (targets that run kernels in order)."""
    return _Drop()(stmt)


__all__ = ["PDL_SYNC", "PDL_TRIGGER", "drop", "sync", "trigger"]
