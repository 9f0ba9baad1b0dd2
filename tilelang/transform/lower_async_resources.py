"""``LowerAsyncResources``: give the kernel-lifetime resources of Hopper's asynchronous copies
their place.

Expects: lowered tile operators (``LowerTileOps``), which mark what they need where they
need it: a tensor map as ``AttrStmt(var, "tl.tensor_map", tensormap_encode_tiled(...))``
around the code that uses it, an mbarrier array as an ``AllocBuffer`` annotated
``tl.mbarrier`` (the arrive count of each barrier), a per-thread variable that lives as long
as the kernel (a phase parity, a ring's iteration base) as an ``AllocBuffer`` annotated
``tl.kernel_var`` (its initial value).
Guarantees (CUDA):

* each tensor map is encoded once on the host, before the launch (equal maps are shared); the
  kernel receives it as a ``const __grid_constant__ CUtensorMap`` parameter;
* the mbarrier arrays and kernel variables are allocated at the start of the kernel; the
  variables get their initial values; thread 0 initializes every barrier with its arrive
  count, then ``fence.mbarrier_init`` and a barrier of the block (of the cluster, in a
  ``T.ClusterKernel``) make them visible to every thread and to the async proxy before any
  use (``PlanSharedMemory`` then places the barriers
  in the shared arena, 8-byte aligned like every tile).

CPU: a kernel that uses mbarriers or tensor maps raises ``LoweringError`` (they exist on
CUDA sm_90 and newer only).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..device import cluster
from ..device import sm80 as device
from ..device import tma
from ..engine.target import is_cpu
from ..errors import LoweringError
from ..ops.copy import KERNEL_VAR, MBARRIER, TENSOR_MAP
from ..ir_utils import StmtMutator, find_all, launch_chain, relaunch, seq, substitute
from .passes import function_pass, target_of


class _Collect(StmtMutator):
    """Removes the marked resources of one kernel body, remembering them."""

    def __init__(self):
        self.maps: list = []  # (var, encode call)
        self.barriers: list = []  # AllocBuffer
        self.kernel_vars: list = []  # AllocBuffer

    def visit_AttrStmt(self, s):
        if s.attr_key == TENSOR_MAP:
            self.maps.append((s.node, s.value))
            return self(s.body)
        return self.generic(s)

    def visit_AllocBuffer(self, s):
        if MBARRIER in s.annotations:
            self.barriers.append(s)
            return None
        if KERNEL_VAR in s.annotations:
            self.kernel_vars.append(s)
            return None
        return s


def _same_map(a, b) -> bool:
    return tvm_ffi.structural_equal(list(a.args[1:]), list(b.args[1:]), map_free_vars=False) \
        and tvm_ffi.structural_equal(a.attrs, b.attrs)


def arrive_counts(alloc) -> list[int]:
    return [int(c) for c in alloc.annotations[MBARRIER]]


class _Kernels(StmtMutator):
    def visit_AttrStmt(self, s):
        if s.attr_key != "thread_extent":
            return self.generic(s)
        chain, body = launch_chain(s)
        col = _Collect()
        body = col(body)
        if not (col.maps or col.barriers or col.kernel_vars):
            return s
        tx, threads = None, 1
        for a in chain:
            if a.attr_key == "thread_extent" and a.node.thread_tag.startswith("threadIdx"):
                threads *= int(a.value)
                if a.node.thread_tag == "threadIdx.x":
                    tx = a.node.var
        head = [tirx.AllocBuffer(a.buffer, annotations={k: v for k, v in a.annotations.items()
                                                         if k != MBARRIER})
                for a in col.barriers]
        for a in col.kernel_vars:
            head.append(tirx.AllocBuffer(a.buffer))
            init = tirx.const(int(a.annotations[KERNEL_VAR]), a.buffer.dtype)
            head.append(tirx.BufferStore(a.buffer, init, [0]))
        if col.barriers:
            inits = []
            for a in col.barriers:
                for i, count in enumerate(arrive_counts(a)):
                    addr = tirx.address_of(tirx.BufferLoad(a.buffer, [i]))
                    inits.append(tirx.Evaluate(tma.mbarrier_init(addr, count)))
            inits.append(tirx.Evaluate(tma.fence_mbarrier_init()))
            first = tirx.const(True, "bool") if tx is None else tx == 0
            in_cluster = any(a.attr_key == "thread_extent" and a.node.thread_tag in
                             cluster.CLUSTER_TAGS and int(a.value) > 1 for a in chain)
            # in a cluster, other blocks may multicast into this block's barriers or arrive on
            # them: every block's barriers are initialized before any block goes on
            head += [tirx.IfThenElse(first, seq(inits), None),
                     tirx.Evaluate(cluster.sync() if in_cluster else device.barrier(0, threads))]
        body = seq(head + [body])
        # tensor maps: one per distinct encoding, encoded on the host before the launch
        kept, vmap = [], {}
        for var, enc in col.maps:
            same = next((v for v, e in kept if _same_map(e, enc)), None)
            if same is not None:
                vmap[var] = same
            elif all(v is not var for v, _ in kept):
                kept.append((var, enc))
        if vmap:
            body = substitute(body, vmap)
        body = relaunch(chain, body)
        host = []
        for var, enc in kept:
            host.append(tirx.Bind(var, tirx.op.tvm_stack_alloca("tensormap", 1)))
            host.append(tirx.Evaluate(enc))
        return seq(host + [body])


@function_pass("tl.LowerAsyncResources")
def LowerAsyncResources(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        used = find_all(func.body, tirx.AllocBuffer, lambda a: MBARRIER in a.annotations)
        if used or find_all(func.body, tirx.AttrStmt, lambda a: a.attr_key == TENSOR_MAP):
            name = used[0].buffer.name if used else "a tensor map"
            raise LoweringError(f"the CPU backend cannot run a kernel that uses {name}: mbarriers "
                                "and TMA exist on CUDA (sm_90 and newer) only")
        return func
    return func.with_body(_Kernels()(func.body))
