// Reductions across the threads of a block that hold parts of the same row.
#pragma once
#include "common.h"

namespace tl {

struct SumOp {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return a + b; }
};
struct MaxOp {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return a > b ? a : b; }
};
struct MinOp {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return a < b ? a : b; }
};

// Combine x over the EXTENT threads whose ids differ only in the digit of stride STRIDE
// (a power of two each), among the NTHREADS threads of a thread group starting at thread
// OFFSET. Lanes of one warp exchange values by shuffles; digits above the warp go through
// `scratch` (one slot per thread of the group) between barriers of the group (BARRIER 0: the
// whole block, __syncthreads; else bar.sync BARRIER, NTHREADS), so every thread of the group
// must call it.
template <typename Op, int EXTENT, int STRIDE, int NTHREADS, int OFFSET = 0, int BARRIER = 0,
          typename T>
TL_DEVICE T all_reduce(T x, T* scratch) {
  if constexpr (EXTENT <= 1) {
    return x;
  } else if constexpr (STRIDE * EXTENT <= 32) {
#pragma unroll
    for (int off = STRIDE * EXTENT / 2; off >= STRIDE; off /= 2) {
      x = Op::apply(x, shfl_xor(x, off));
    }
    return x;
  } else {
    static_assert(STRIDE >= 32, "a reduction digit may not straddle the warp boundary");
    const int tid = threadIdx.x - OFFSET;
    group_sync<BARRIER, NTHREADS>();
    scratch[tid] = x;
    group_sync<BARRIER, NTHREADS>();
    const int base = tid - ((tid / STRIDE) % EXTENT) * STRIDE;
    T acc = scratch[base];
#pragma unroll
    for (int k = 1; k < EXTENT; ++k) acc = Op::apply(acc, scratch[base + k * STRIDE]);
    return acc;
  }
}

// The same within one warp only (no scratch needed).
template <typename Op, int EXTENT, int STRIDE, int NTHREADS, typename T>
TL_DEVICE T all_reduce(T x) {
  static_assert(STRIDE * EXTENT <= 32, "a cross-warp reduction needs scratch memory");
  return all_reduce<Op, EXTENT, STRIDE, NTHREADS, 0, 0, T>(x, static_cast<T*>(nullptr));
}

}  // namespace tl
