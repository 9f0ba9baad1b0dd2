"""Register rebalancing between warp groups (sm_90a): ``setmaxnreg``.

``setmaxnreg.dec n`` lowers the executing warp group's per-thread register limit to ``n`` and
returns the rest to the block's pool; ``setmaxnreg.inc n`` raises it to ``n``, taking
registers from that pool and *waiting until the pool has them* (an increase the pool can
never satisfy waits forever).  All threads of the warp group execute it (``.sync.aligned``);
``n`` is a multiple of 8 in 24..256.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script import tirx as _T

from ..errors import LoweringError
from .effects import Effect, call, register_device_op

REGISTER_FILE = 65536  # 32-bit registers per SM, the most one block can hold
MAX_PER_THREAD = 255


def _emit(c):
    n, inc = int(c.args[0].value), bool(c.args[1].value)
    chain = _T.ptx.setmaxnreg.inc if inc else _T.ptx.setmaxnreg.dec
    return chain.sync.aligned.u32(n)


SETMAXNREG = register_device_op(
    "tl.device.setmaxnreg", Effect(), _emit,
    "setmaxnreg.{inc,dec}.sync.aligned.u32 n: the warp group's per-thread register limit "
    "becomes n (inc waits until the block's pool can supply the registers)")


def check_count(n: int, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 24 <= n <= 256 or n % 8:
        raise LoweringError(f"{what}: setmaxnreg takes a multiple of 8 in 24..256, got {n!r}")
    return n


def setmaxnreg(n: int, inc: bool) -> tirx.Call:
    return call(SETMAXNREG, check_count(n, "setmaxnreg"), bool(inc))


def launch_registers(threads: int) -> int:
    """Registers per thread a block of ``threads`` threads holds at launch at most (ptxas
    gives a kernel with ``setmaxnreg`` the largest count its launch bounds allow, in steps
    of 8): the block's pool is this times ``threads``."""
    return min(MAX_PER_THREAD, REGISTER_FILE // threads) // 8 * 8


# A kernel's request for the register targets of automatic warp specialization
# (``T.annotate_producer_reg_dealloc`` / ``T.annotate_consumer_reg_alloc``): an ``Evaluate``
# of this op with (role, count), role 0 the producer, 1 the consumers; ``WarpSpecialize``
# reads and removes it.
REGISTER_HINT = "tl.ws_register_hint"
PRODUCER, CONSUMER, NO_REBALANCE = 0, 1, 2  # NO_REBALANCE: T.disable_warp_group_reg_alloc
tvm.ir.register_op_attr(REGISTER_HINT, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)
tvm.ir.register_op_attr(REGISTER_HINT, "TScriptPrinterName", "ws_register_hint")


def register_hint(role: int, n: int) -> tirx.Call:
    if role == NO_REBALANCE:
        n = 0
    else:
        n = check_count(n, "T.annotate_producer_reg_dealloc" if role == PRODUCER
                        else "T.annotate_consumer_reg_alloc")
    return tvm.ir.Call(tvm.ir.Op.get(REGISTER_HINT),
                       [tirx.const(role, "int32"), tirx.const(n, "int32")], ret_ty="int32")


def hint_of(stmt) -> tuple[int, int] | None:
    """(role, count) of a register-hint statement, else ``None``."""
    c = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    if isinstance(c, tvm.ir.Call) and isinstance(c.op, tvm.ir.Op) and c.op.name == REGISTER_HINT:
        return int(c.args[0].value), int(c.args[1].value)
    return None
