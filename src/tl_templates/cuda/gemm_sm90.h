// Helpers of the Hopper wgmma path that are not instructions (the instructions themselves are
// TVM's PTX ops, emitted by tilelang/device/wgmma.py).
#pragma once

#include "common.h"

namespace tl {

// The 64-bit wgmma matrix descriptor of a shared tile starting at `smem`: start address >> 4
// (bits 0-13), leading-dimension byte offset >> 4 (16-29), stride-dimension byte offset >> 4
// (32-45), base offset 0 (the tile starts on its swizzle's repeat), layout type (62-63:
// 1 = 128B, 2 = 64B, 3 = 32B swizzle).
// A wgmma takes one descriptor per warp (its warp group names one tile), so lane 0's is
// broadcast: the compiler then knows the value is warp-uniform and keeps it, and the constants
// the lowering adds to step through the tile, in uniform registers (tl.ShareDescriptors binds
// it once per run of wgmmas).  Called only as a wgmma's operand, where the warp is converged.
TL_DEVICE uint64_t wgmma_desc(const void* smem, int lbo_bytes, int sbo_bytes, int layout_type) {
  uint32_t lo = ((smem_addr(smem) & 0x3FFFF) >> 4) | (((lbo_bytes >> 4) & 0x3FFF) << 16);
  asm("shfl.sync.idx.b32 %0, %0, 0, 0x1f, 0xffffffff;" : "+r"(lo));
  uint32_t hi = ((sbo_bytes >> 4) & 0x3FFF) | (static_cast<uint32_t>(layout_type & 0x3) << 30);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// No instruction: N registers of a per-thread array are read and written here as far as the
// compiler knows, so it keeps their uses on the right side of wgmma.fence / wait_group.
TL_DEVICE void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
TL_DEVICE void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
TL_DEVICE void fence_operand(int& r) { asm volatile("" : "+r"(r)::"memory"); }

template <int N, typename T>
TL_DEVICE void fence_operands(T* regs) {
#pragma unroll
  for (int i = 0; i < N; ++i) fence_operand(regs[i]);
}

}  // namespace tl
