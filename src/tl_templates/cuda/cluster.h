// Thread block clusters (sm_90 and newer): the cluster barrier, a block's rank in its cluster,
// arrivals on an mbarrier in another block's shared memory, and the cluster launch control
// queries of sm_100.  Kernels that use them include this header (tilelang emits the include).
#pragma once

#include "common.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "tl_templates/cuda/cluster.h: thread block clusters need sm_90 or newer"
#endif

namespace tl {

// barrier.cluster.arrive: this thread has arrived at the cluster barrier; its earlier memory
// accesses are released to the cluster.  Unaligned: lanes may arrive at different times.
TL_DEVICE void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }

// barrier.cluster.arrive.relaxed: arrive without ordering earlier memory accesses.
TL_DEVICE void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}

// barrier.cluster.wait: wait until every non-exited thread of the cluster has arrived; what
// they released is then visible (acquire).
TL_DEVICE void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }

TL_DEVICE void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// %cluster_ctarank: the rank of this block in its cluster, 0 .. blocks per cluster - 1.
TL_DEVICE int block_rank_in_cluster() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return static_cast<int>(rank);
}

// %cluster_nctarank: the number of blocks in this block's cluster.
TL_DEVICE int cluster_size() {
  uint32_t n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return static_cast<int>(n);
}

// The shared::cluster address of the same shared-memory offset as `ptr` in the block of rank
// `cta_id` of this cluster (mapa).
TL_DEVICE uint32_t cluster_smem_addr(void* ptr, int cta_id) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(smem_addr(ptr)), "r"(cta_id));
  return remote;
}

// Arrive on the mbarrier at the same shared-memory offset as `bar`, in the block of rank
// `cta_id` of this cluster, releasing this thread's earlier writes to the cluster.
TL_DEVICE void mbarrier_arrive_remote(void* bar, int cta_id) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];"
               ::"r"(cluster_smem_addr(bar, cta_id))
               : "memory");
}

// The same arrive releasing at CTA scope (PTX's default), as Hopper pipelines signal that a
// thread's reads of a stage are complete.  The cluster-scope release above compiles to a
// GPU-wide memory barrier (MEMBAR.ALL.GPU) before the arrive, which in a pipeline's loop
// stalls the consumer every iteration.
TL_DEVICE void mbarrier_arrive_remote_cta(void* bar, int cta_id) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_smem_addr(bar, cta_id))
               : "memory");
}

// Wait on this block's mbarrier for the phase of parity `parity`, acquiring at cluster scope
// (what other blocks released by arriving is then visible).
TL_DEVICE void mbarrier_wait_cluster(void* bar, int parity) {
  uint32_t addr = smem_addr(bar);
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// Make mbarrier initializations of this thread visible to the other blocks of the cluster.
TL_DEVICE void fence_mbarrier_init_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Cluster launch control (sm_100+): ask the scheduler to cancel a not yet launched cluster and
// hand its coordinates to this one.  The 16-byte response lands in `result` (shared) and
// completes as transaction bytes on `bar`.  Below sm_100 these trap.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define TL_HAS_CLC 1
#endif

TL_DEVICE void clc_try_cancel(void* result, void* bar) {
#ifdef TL_HAS_CLC
  asm volatile(
      "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 "
      "[%0], [%1];" ::"r"(smem_addr(result)), "r"(smem_addr(bar))
      : "memory");
#else
  asm volatile("trap;");
#endif
}

TL_DEVICE void clc_try_cancel_multicast(void* result, void* bar) {
#ifdef TL_HAS_CLC
  asm volatile(
      "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes."
      "multicast::cluster::all.b128 [%0], [%1];" ::"r"(smem_addr(result)), "r"(smem_addr(bar))
      : "memory");
#else
  asm volatile("trap;");
#endif
}

// 1 when the response in `result` canceled a cluster (its coordinates are then valid).
TL_DEVICE int clc_is_canceled(const void* result) {
#ifdef TL_HAS_CLC
  uint32_t ok;
  asm volatile(
      "{\n.reg .b128 h;\n.reg .pred p;\nld.shared.b128 h, [%1];\n"
      "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, h;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(smem_addr(result))
      : "memory");
  return static_cast<int>(ok);
#else
  asm volatile("trap;");
  return 0;
#endif
}

#ifdef TL_HAS_CLC
#define TL_CLC_FIRST_CTAID(AXIS)                                                          \
  uint32_t v;                                                                             \
  asm volatile("{\n.reg .b128 h;\nld.shared.b128 h, [%1];\n"                              \
               "clusterlaunchcontrol.query_cancel.get_first_ctaid::" AXIS ".b32.b128 %0, h;\n}\n" \
               : "=r"(v)                                                                  \
               : "r"(smem_addr(result))                                                   \
               : "memory");                                                               \
  return v;
#else
#define TL_CLC_FIRST_CTAID(AXIS) \
  asm volatile("trap;");         \
  return 0u;
#endif

// The block coordinates (x, y, z) of the first block of the canceled cluster.
TL_DEVICE uint32_t clc_get_first_ctaid_x(const void* result) { TL_CLC_FIRST_CTAID("x") }
TL_DEVICE uint32_t clc_get_first_ctaid_y(const void* result) { TL_CLC_FIRST_CTAID("y") }
TL_DEVICE uint32_t clc_get_first_ctaid_z(const void* result) { TL_CLC_FIRST_CTAID("z") }

#undef TL_CLC_FIRST_CTAID

}  // namespace tl
