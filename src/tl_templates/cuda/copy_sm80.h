// Asynchronous global -> shared copies (cp.async, sm_80+): issue, commit, wait.
#pragma once
#include "common.h"

namespace tl {

// Copy N (4, 8 or 16) bytes; when `valid` is false the destination is zero-filled and the
// source is not read.
template <int N>
TL_DEVICE void cp_async(void* smem_dst, const void* gmem_src, bool valid) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8 or 16 bytes");
  uint32_t dst = smem_addr(smem_dst);
  int src_size = valid ? N : 0;
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
                 "r"(src_size));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(gmem_src),
                 "n"(N), "r"(src_size));
  }
}

TL_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most N committed groups are still in flight.
template <int N>
TL_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

}  // namespace tl
