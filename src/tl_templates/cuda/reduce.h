// Reductions across the threads of a block that hold parts of the same row.
#pragma once
#include "common.h"

namespace tl {

// Max / min of two values. Floats follow fmax/fmin: a NaN operand is ignored (the other one
// is the result; NaN only when both are). The *_nan forms propagate: a NaN operand gives NaN.
template <typename T> TL_DEVICE T max_of(T a, T b) { return a > b ? a : b; }
template <typename T> TL_DEVICE T min_of(T a, T b) { return a < b ? a : b; }
TL_DEVICE float max_of(float a, float b) { return fmaxf(a, b); }
TL_DEVICE float min_of(float a, float b) { return fminf(a, b); }
TL_DEVICE double max_of(double a, double b) { return fmax(a, b); }
TL_DEVICE double min_of(double a, double b) { return fmin(a, b); }
TL_DEVICE half max_of(half a, half b) { return __hmax(a, b); }
TL_DEVICE half min_of(half a, half b) { return __hmin(a, b); }
TL_DEVICE __nv_bfloat16 max_of(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmax(a, b); }
TL_DEVICE __nv_bfloat16 min_of(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmin(a, b); }

template <typename T> TL_DEVICE T max_nan(T a, T b) { return max_of(a, b); }  // integers
template <typename T> TL_DEVICE T min_nan(T a, T b) { return min_of(a, b); }
TL_DEVICE float max_nan(float a, float b) { return isnan(a) ? a : isnan(b) ? b : fmaxf(a, b); }
TL_DEVICE float min_nan(float a, float b) { return isnan(a) ? a : isnan(b) ? b : fminf(a, b); }
TL_DEVICE double max_nan(double a, double b) { return isnan(a) ? a : isnan(b) ? b : fmax(a, b); }
TL_DEVICE double min_nan(double a, double b) { return isnan(a) ? a : isnan(b) ? b : fmin(a, b); }
TL_DEVICE half max_nan(half a, half b) { return __hmax_nan(a, b); }
TL_DEVICE half min_nan(half a, half b) { return __hmin_nan(a, b); }
TL_DEVICE __nv_bfloat16 max_nan(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmax_nan(a, b); }
TL_DEVICE __nv_bfloat16 min_nan(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmin_nan(a, b); }

// A thread folding its own registers two at a time: *acc = op(*acc, x) on both lanes of a
// half2 / __nv_bfloat162 pair with one instruction (tl.device.fold_pair). max2/min2 ignore a
// NaN operand like max_of; the _nan forms propagate it; abs_* fold |x|.
template <typename P> TL_DEVICE void add2(P* acc, P x) { *acc = __hadd2(*acc, x); }
template <typename P> TL_DEVICE void max2(P* acc, P x) { *acc = __hmax2(*acc, x); }
template <typename P> TL_DEVICE void min2(P* acc, P x) { *acc = __hmin2(*acc, x); }
template <typename P> TL_DEVICE void max2_nan(P* acc, P x) { *acc = __hmax2_nan(*acc, x); }
template <typename P> TL_DEVICE void min2_nan(P* acc, P x) { *acc = __hmin2_nan(*acc, x); }
template <typename P> TL_DEVICE void abs_add2(P* acc, P x) { add2(acc, __habs2(x)); }
template <typename P> TL_DEVICE void abs_max2(P* acc, P x) { max2(acc, __habs2(x)); }
template <typename P> TL_DEVICE void abs_max2_nan(P* acc, P x) { max2_nan(acc, __habs2(x)); }

struct SumOp {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return a + b; }
};
struct MaxOp {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return max_of(a, b); }
};
struct MinOp {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return min_of(a, b); }
};
struct MaxOpNan {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return max_nan(a, b); }
};
struct MinOpNan {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return min_nan(a, b); }
};
struct BitXorOp {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return a ^ b; }
};
struct BitAndOp {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return a & b; }
};
struct BitOrOp {
  template <typename T> TL_DEVICE static T apply(T a, T b) { return a | b; }
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

namespace tl {

// T.finalize_reducer: every thread of a group of NTHREADS threads (starting at thread OFFSET,
// barrier BARRIER as in all_reduce) holds its own N-element array `vals`; combine the arrays
// element by element and leave the result in every thread's array. Lanes of a warp combine
// by shuffles; across warps each warp's partial array goes through `scratch`
// (NTHREADS / 32 * N elements) between barriers of the group, so every thread of the group
// must call it. NTHREADS is a power of two up to 32 or a multiple of 32.
template <typename Op, int N, int NTHREADS, int OFFSET = 0, int BARRIER = 0, typename T>
TL_DEVICE void all_reduce_array(T* vals, T* scratch) {
  constexpr int kLanes = NTHREADS < 32 ? NTHREADS : 32;
  static_assert(NTHREADS <= 32 ? (NTHREADS & (NTHREADS - 1)) == 0 : NTHREADS % 32 == 0,
                "a reducer's thread group is a power of two up to 32 or whole warps");
#pragma unroll
  for (int e = 0; e < N; ++e) {
#pragma unroll
    for (int off = kLanes / 2; off >= 1; off /= 2) vals[e] = Op::apply(vals[e], shfl_xor(vals[e], off));
  }
  if constexpr (NTHREADS > 32) {
    constexpr int kWarps = NTHREADS / 32;
    const int tid = threadIdx.x - OFFSET;
    const int warp = tid / 32, lane = tid % 32;
    group_sync<BARRIER, NTHREADS>();
    for (int e = lane; e < N; e += 32) scratch[warp * N + e] = vals[e];
    group_sync<BARRIER, NTHREADS>();
#pragma unroll
    for (int e = 0; e < N; ++e) {
      T acc = scratch[e];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) acc = Op::apply(acc, scratch[w * N + e]);
      vals[e] = acc;
    }
  }
}

}  // namespace tl
