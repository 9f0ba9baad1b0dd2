// Shared basics of tilelang's device code: types, shared-memory addresses, swizzles, sync.
#pragma once

#ifndef __CUDACC_RTC__
#include <cstdint>
#endif
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define TL_DEVICE __device__ __forceinline__

// TVM writes T.fmod of half-precision values as hfmod, which CUDA's headers do not declare:
// computed in float32 (exact) and rounded once.
TL_DEVICE half hfmod(half a, half b) {
  return __float2half(fmodf(__half2float(a), __half2float(b)));
}
TL_DEVICE __nv_bfloat16 hfmod(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16(fmodf(__bfloat162float(a), __bfloat162float(b)));
}

// NVRTC sees no <cuda.h>, yet a kernel that loads with TMA takes its tensor maps as
// `const __grid_constant__ CUtensorMap` parameters: declare the driver's type (128 opaque bytes,
// 128-byte aligned, as CUDA 13's cuda.h declares it), when cuda.h is absent.
#if defined(__CUDACC_RTC__) && !defined(__cuda_cuda_h__)
typedef struct CUtensorMap_st {
  alignas(128) unsigned long long opaque[16];
} CUtensorMap;
#endif

namespace tl {

// Address of a generic pointer into shared memory, as the 32-bit value PTX instructions take.
TL_DEVICE uint32_t smem_addr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// The swizzle of a row-major shared tile with ROW elements of EB bytes per row: the 16-byte
// chunk c of row r moves to chunk c ^ ((r / (8 / C)) % C) within its group of C = min(8,
// chunks per row) chunks. ldmatrix and cp.async then touch 8 distinct bank groups per phase.
// tilelang.layout.swizzle builds the same map for the TIR side; the two must agree. Only rows
// of a power of two (< 8) or a multiple of 8 chunks are swizzled (tilelang decides, SWIZZLE).
template <int ROW, int EB, bool SWIZZLE>
struct Tile {
  static constexpr int kChunk = 16 / EB;             // elements per 16-byte chunk
  static constexpr int kChunks = ROW / kChunk;       // chunks per row
  static constexpr int kGroup = kChunks >= 8 ? 8 : kChunks;
  static constexpr int kRowsPerLine = kGroup >= 8 ? 1 : (8 / kGroup);
  TL_DEVICE static int offset(int row, int col) {
    if constexpr (!SWIZZLE || kGroup < 2) {
      return row * ROW + col;
    } else {
      int chunk = col / kChunk;
      int sw = (chunk & ~(kGroup - 1)) | ((chunk ^ (row / kRowsPerLine)) & (kGroup - 1));
      return row * ROW + sw * kChunk + col % kChunk;
    }
  }
};

// The device compiler may take `n >= 1` as given: a loop's trip count that the launch
// guarantees (tilelang/transform/trip_counts.py), so no path around the loop is kept.
template <typename T>
TL_DEVICE int assume_trip_count(T n) {
  __builtin_assume(n >= 1);
  return 0;
}

TL_DEVICE void sync_threads() { __syncthreads(); }

// Barrier of a thread group: the block (BARRIER 0) or the NTHREADS threads of named barrier
// BARRIER.
template <int BARRIER, int NTHREADS>
TL_DEVICE void group_sync() {
  if constexpr (BARRIER == 0) {
    __syncthreads();
  } else {
    asm volatile("bar.sync %0, %1;\n" ::"n"(BARRIER), "n"(NTHREADS) : "memory");
  }
}

template <typename T>
TL_DEVICE T shfl_xor(T x, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, x, lane_mask);
}

}  // namespace tl
