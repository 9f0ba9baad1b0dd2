// Barriers among a subset of a block's threads whose id may be computed at run time
// (T.sync_threads(id, count) with a runtime id, T.named_barrier_arrive).  Both use the
// unaligned barrier forms: the lanes of a warp may reach them at different times.
#pragma once

#include "common.h"

namespace tl {

// barrier.sync id, count: wait until `count` threads (a multiple of 32) have reached barrier
// `id` (0..15) of this block; they then see each other's earlier shared-memory writes.
TL_DEVICE void __sync_thread_partial(int barrier_id, int thread_count) {
  asm volatile("barrier.sync %0, %1;" ::"r"(barrier_id), "r"(thread_count) : "memory");
}

// barrier.arrive id, count: count this thread towards barrier `id` of `count` threads without
// waiting (a producer's signal to threads that sync on the same barrier).
TL_DEVICE void __named_barrier_arrive(int barrier_id, int thread_count) {
  asm volatile("barrier.arrive %0, %1;" ::"r"(barrier_id), "r"(thread_count) : "memory");
}

}  // namespace tl
