"""``T.pdl_trigger()`` / ``T.pdl_sync()``: programmatic dependent launch between the kernels
of one function (sm_90 and newer).

``T.pdl_trigger()`` in a kernel lets the next kernel start launching before this one ends;
``T.pdl_sync()`` in that next kernel waits, before it reads what the earlier one wrote, until
the earlier kernel has completed.  Results are those of running the kernels one after the other
on every target; before sm_90 and on the CPU both do nothing.
"""

from __future__ import annotations

from tvm import tirx

from ..device import launch
from .kernel import _current


def pdl_trigger() -> tirx.PrimExpr:
    """Let the kernel launched after this one begin (``griddepcontrol.launch_dependents``)."""
    _current("T.pdl_trigger")
    return launch.trigger()


def pdl_sync() -> tirx.PrimExpr:
    """Wait until the kernels this one depends on have completed (``griddepcontrol.wait``)."""
    _current("T.pdl_sync")
    return launch.sync()


__all__ = ["pdl_sync", "pdl_trigger"]
