"""``DebugBarriers``: with the pass config ``tl.debug_barriers``, every mbarrier wait of a CUDA
kernel becomes a bounded wait that, when it gives up, prints the block, the thread, the
barrier's name, its stage (the index into its barrier array) and the expected parity, then
traps.  A wrong arrive count or ``expect_tx`` byte count is then a launch error naming the
barrier instead of a hung GPU.

Expects: lowered kernels whose waits are ``tl.device.mbarrier_wait`` calls (from pipelines,
synchronous TMA copies and the user's ``T.mbarrier_wait_parity``); run after
``LowerAsyncResources``.  Guarantees: with the config off (the default), the function is
unchanged; with it on, each wait has the debug form of ``tilelang.device.tma.mbarrier_wait``.
CPU: unchanged.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..device import tma
from ..engine.target import is_cpu
from . import pass_config
from ..ir_utils import map_nodes
from .passes import function_pass, target_of

DEFAULT_BOUND = 1 << 20  # failed try_wait rounds before giving up (seconds on an H200)


def bound_of(value) -> int | None:
    """The number of tries the config value asks for, ``None`` when debug mode is off."""
    if value is None or value is False:
        return None
    if value is True:
        return DEFAULT_BOUND
    n = int(value)
    if n < 1:
        raise ValueError(f"tl.debug_barriers: expected True or a positive number of tries, "
                         f"got {value!r}")
    return n


def _name_and_stage(addr):
    """Barrier name and index of ``address_of(bars[i])``; ``("?", -1)`` for other addresses."""
    if isinstance(addr, tvm.ir.Call) and addr.op.name == "tirx.address_of" and \
            isinstance(addr.args[0], tvm.ir.TensorLoad):
        load = addr.args[0]
        idx = load.indices[-1] if len(load.indices) else tirx.const(0, "int32")
        return load.source.name, idx
    return "?", tirx.const(-1, "int32")


@function_pass("tl.DebugBarriers")
def DebugBarriers(func: tirx.PrimFunc) -> tirx.PrimFunc:
    bound = bound_of(pass_config.get(pass_config.PassConfigKey.TL_DEBUG_BARRIERS))
    if bound is None or is_cpu(target_of(func)):
        return func

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and c.op.same_as(tma.MBARRIER_WAIT.op):
            name, stage = _name_and_stage(c.args[0])
            return tma.bounded_wait(c, name, stage, bound)
        return c

    return func.with_body(map_nodes(func.body, [(tvm.ir.Call, on_call)]))
