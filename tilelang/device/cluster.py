"""Thread block clusters (sm_90 and newer): the device operations of ``T.ClusterKernel``
programs, each with its declared effect.

A cluster is a group of blocks (its shape given at launch) that run at the same time on
neighbouring SMs and can synchronize and reach each other's shared memory.  The ops are the
cluster barrier (``barrier.cluster.arrive`` / ``.wait``), the block's rank in its cluster
(``%cluster_ctarank``), an arrival on the mbarrier of another block of the cluster (``mapa`` +
``mbarrier.arrive.release.cluster.shared::cluster``), an mbarrier wait that acquires at cluster
scope, and the cluster launch control queries of sm_100 (``clusterlaunchcontrol.*``; they trap
below sm_100).  Each is a helper of ``src/tl_templates/cuda/cluster.h``, which a kernel that
uses one includes.

A launch's cluster shape is the ``clusterCtaIdx.{x,y,z}`` thread extents of its kernel (see
``T.ClusterKernel``): TVM's host/device split passes them to the launch (``cuLaunchKernelEx``
with the cluster dimension attribute).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.backend.cuda.op import cuda_func_call

from .effects import Effect, Mechanism, call, device_op_of, register_device_op

HEADER = "#include <tl_templates/cuda/cluster.h>\n"
CLUSTER_TAGS = ("clusterCtaIdx.x", "clusterCtaIdx.y", "clusterCtaIdx.z")
# an mbarrier allocation that other blocks of the cluster arrive on (T.alloc_cluster_barrier)
CLUSTER_BARRIER = "tl.cluster_barrier"


def _helper(name: str, ret: str = "void"):
    def emit(c):
        return cuda_func_call(f"tl::{name}", *c.args, source_code=HEADER, return_type=ret)

    return emit


def _op(name: str, effect: Effect, doc: str, ret: str = "void"):
    return register_device_op(f"tl.device.{name}", effect, _helper(name, ret), doc)


CLUSTER_ARRIVE = _op("cluster_arrive", Effect(),
                     "barrier.cluster.arrive.release: arrive at the cluster barrier")
CLUSTER_ARRIVE_RELAXED = _op("cluster_arrive_relaxed", Effect(),
                             "barrier.cluster.arrive.relaxed: arrive without ordering memory")
CLUSTER_WAIT = _op("cluster_wait", Effect(),
                   "barrier.cluster.wait.acquire: wait for every thread of the cluster")
CLUSTER_SYNC = _op("cluster_sync", Effect(), "cluster barrier: arrive, then wait")
BLOCK_RANK = _op("block_rank_in_cluster", Effect(),
                 "%cluster_ctarank: this block's rank in its cluster", ret="int32")
MBARRIER_ARRIVE_REMOTE = _op(
    "mbarrier_arrive_remote", Effect(commits=Mechanism.MBARRIER),
    "arrive (release, cluster scope) on the mbarrier at this address in block `cta_id` of "
    "the cluster")
MBARRIER_ARRIVE_REMOTE_CTA = _op(
    "mbarrier_arrive_remote_cta", Effect(commits=Mechanism.MBARRIER),
    "arrive (release, CTA scope) on the mbarrier at this address in block `cta_id` of the "
    "cluster: this thread's reads are complete (a consumer releasing a pipeline stage)")
MBARRIER_WAIT_CLUSTER = _op(
    "mbarrier_wait_cluster", Effect(waits=Mechanism.MBARRIER),
    "wait on this block's mbarrier for the phase of parity `parity`, acquiring at cluster "
    "scope (what other blocks released by arriving is visible after it)")
CLC_TRY_CANCEL = _op("clc_try_cancel", Effect(),
                     "clusterlaunchcontrol.try_cancel (sm_100+): response -> result, on bar")
CLC_TRY_CANCEL_MULTICAST = _op("clc_try_cancel_multicast", Effect(),
                               "clusterlaunchcontrol.try_cancel, multicast to the cluster")
CLC_IS_CANCELED = _op("clc_is_canceled", Effect(),
                      "1 when the response canceled a cluster", ret="int32")
CLC_FIRST_CTAID = tuple(
    _op(f"clc_get_first_ctaid_{axis}", Effect(),
        f"the {axis} block index of the first block of the canceled cluster", ret="uint32")
    for axis in "xyz")

OPS = (CLUSTER_ARRIVE, CLUSTER_ARRIVE_RELAXED, CLUSTER_WAIT, CLUSTER_SYNC, BLOCK_RANK,
       MBARRIER_ARRIVE_REMOTE, MBARRIER_ARRIVE_REMOTE_CTA, MBARRIER_WAIT_CLUSTER, CLC_TRY_CANCEL,
       CLC_TRY_CANCEL_MULTICAST, CLC_IS_CANCELED, *CLC_FIRST_CTAID)
# the cluster launch control ops exist from sm_100 on
SM100_OPS = (CLC_TRY_CANCEL, CLC_TRY_CANCEL_MULTICAST, CLC_IS_CANCELED, *CLC_FIRST_CTAID)


def arrive() -> tirx.Call:
    return call(CLUSTER_ARRIVE)


def arrive_relaxed() -> tirx.Call:
    return call(CLUSTER_ARRIVE_RELAXED)


def wait() -> tirx.Call:
    return call(CLUSTER_WAIT)


def sync() -> tirx.Call:
    return call(CLUSTER_SYNC)


def block_rank() -> tirx.Call:
    return call(BLOCK_RANK)


def mbarrier_arrive_remote(bar_addr, cta_id) -> tirx.Call:
    return call(MBARRIER_ARRIVE_REMOTE, bar_addr, cta_id)


def mbarrier_arrive_remote_cta(bar_addr, cta_id) -> tirx.Call:
    return call(MBARRIER_ARRIVE_REMOTE_CTA, bar_addr, cta_id)


def mbarrier_wait_cluster(bar_addr, parity) -> tirx.Call:
    return call(MBARRIER_WAIT_CLUSTER, bar_addr, parity)


def clc_try_cancel(result_addr, bar_addr, multicast: bool = False) -> tirx.Call:
    return call(CLC_TRY_CANCEL_MULTICAST if multicast else CLC_TRY_CANCEL, result_addr, bar_addr)


def clc_is_canceled(result_addr) -> tirx.Call:
    return call(CLC_IS_CANCELED, result_addr)


def clc_first_ctaid(axis: int, result_addr) -> tirx.Call:
    return call(CLC_FIRST_CTAID[axis], result_addr, dtype="uint32")


def ops_in(stmt: tirx.Stmt) -> list:
    """The cluster device ops called in ``stmt`` (each once, in order of first use)."""
    found: list = []

    def on_call(c):
        d = device_op_of(c)
        if d in OPS and d not in found:
            found.append(d)

    tvm_ffi.structural_walk(stmt, (tvm.ir.Call, on_call))
    return found


def cluster_extents(chain: list) -> dict:
    """``tag -> extent`` of the cluster thread extents among a kernel's launch attributes."""
    return {a.node.thread_tag: a.value for a in chain
            if a.attr_key == "thread_extent" and a.node.thread_tag in CLUSTER_TAGS}


def rank_groups(dims: tuple[int, int, int], along: set[str]) -> list[int]:
    """The blocks of a cluster of ``dims`` (x, y, z) blocks grouped by their place along the
    axes not in ``along`` (of "x", "y", "z"): one mask of block ranks (``%cluster_ctarank``,
    x fastest) per group, whose blocks differ only along ``along``."""
    cx, cy, cz = dims
    groups: dict = {}
    for z in range(cz):
        for y in range(cy):
            for x in range(cx):
                key = tuple(c for c, axis in ((x, "x"), (y, "y"), (z, "z")) if axis not in along)
                groups[key] = groups.get(key, 0) | 1 << (x + cx * (y + cy * z))
    return list(groups.values())


__all__ = ["CLUSTER_BARRIER", "CLUSTER_TAGS", "HEADER", "OPS", "SM100_OPS", "arrive",
           "arrive_relaxed", "block_rank", "clc_first_ctaid", "clc_is_canceled",
           "clc_try_cancel", "cluster_extents", "mbarrier_arrive_remote",
           "mbarrier_arrive_remote_cta",
           "mbarrier_wait_cluster", "ops_in", "rank_groups", "sync", "wait"]
