"""``ShareDescriptors``: a run of wgmma instructions builds each operand descriptor once.

Expects: lowered CUDA kernels after every pass that follows the tiles a wgmma reads
(``InjectAsyncWaits``, ``PlanSharedMemory``, ``InjectThreadSync``, ``PingPongConsumers``): up
to here each wgmma names its operand tiles in its own arguments, as a descriptor of the tile's
address (``tl.device.wgmma_desc(address_of(tile[...]), ...)``), maybe plus a constant that
steps through the tile (see ``tilelang/ops/gemm.py``).
Guarantees: in a run of consecutive wgmma instructions of one statement sequence, a
descriptor (the same call) used by two or more of them is computed once, bound (``Bind``)
right before the run, and the instructions use the binding.  Values are unchanged: the
instructions of a run write only their accumulator registers, which no descriptor reads.  One
binding is one warp-uniform value (``tl::wgmma_desc`` broadcasts lane 0's), so the device
compiler keeps it and the stepped descriptors in uniform registers.  CPU: unchanged.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..device import wgmma
from ..device.effects import Mechanism, device_op_of, effect_of
from ..engine.target import is_cpu
from ..ir_utils import StmtMutator, find_all, map_nodes, seq
from .passes import function_pass, target_of


def _is_wgmma(s) -> bool:
    eff = effect_of(s.value) if isinstance(s, tirx.Evaluate) else None
    return eff is not None and eff.completes_on == Mechanism.WGMMA_GROUP


def _descriptors(s) -> list:
    return find_all(s, tvm.ir.Call, lambda c: device_op_of(c) is wgmma.DESC)


def _tile_name(desc) -> str:
    loads = find_all(desc.args[0], tvm.ir.TensorLoad)
    return f"{loads[0].source.name}_desc" if loads else "desc"


def _share(run: list) -> list:
    """The run's statements, with the descriptors two or more of them use bound once first."""
    uses: list = []  # [descriptor, statements using it]
    for i, s in enumerate(run):
        for d in _descriptors(s):
            for entry in uses:
                if tvm_ffi.structural_equal(entry[0], d):
                    entry[1].add(i)
                    break
            else:
                uses.append([d, {i}])
    shared = [(d, tirx.Var(_tile_name(d), "uint64")) for d, users in uses if len(users) > 1]
    if not shared:
        return run

    def bound(c):
        for d, v in shared:
            if tvm_ffi.structural_equal(c, d):
                return v
        return c

    return [tirx.Bind(v, d) for d, v in shared] + [map_nodes(s, (tvm.ir.Call, bound))
                                                    for s in run]


class _Runs(StmtMutator):
    def visit_SeqStmt(self, s):
        out, run = [], []
        for x in [self.visit(x) for x in s.seq] + [None]:
            if x is not None and _is_wgmma(x):
                run.append(x)
                continue
            out += _share(run)
            run = []
            if x is not None:
                out.append(x)
        return seq(out)


@function_pass("tl.ShareDescriptors")
def ShareDescriptors(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    return func.with_body(_Runs()(func.body))
