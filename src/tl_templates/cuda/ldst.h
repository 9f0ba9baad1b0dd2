// Explicit-width memory accesses (T.ldg32 ... T.stg256, T.lds32 ... T.sts128): one PTX ld/st
// of 32, 64, 128 or 256 bits per call, on raw bits (uint32_t, uint2, uint4, ulonglong4).
// The `_conditional` forms take a predicate: where it is false nothing is read (the result
// is 0) or written. Each asm has a "memory" clobber, so the compiler keeps them in order with
// the kernel's ordinary loads and stores of the same memory. The address must be aligned to
// the access width.
#pragma once
#include "common.h"

namespace tl {

// global loads ------------------------------------------------------------------------------
TL_DEVICE uint32_t load_global_32(const void* p) {
  uint32_t r;
  asm volatile("ld.global.b32 %0, [%1];\n" : "=r"(r) : "l"(p) : "memory");
  return r;
}
TL_DEVICE uint2 load_global_64(const void* p) {
  uint2 r;
  asm volatile("ld.global.v2.b32 {%0, %1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "l"(p) : "memory");
  return r;
}
TL_DEVICE uint4 load_global_128(const void* p) {
  uint4 r;
  asm volatile("ld.global.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p) : "memory");
  return r;
}
TL_DEVICE uint32_t load_global_32_conditional(const void* p, bool pred) {
  uint32_t r = 0;
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n @q ld.global.b32 %0, [%1];\n}\n"
               : "+r"(r) : "l"(p), "r"(static_cast<int>(pred)) : "memory");
  return r;
}
TL_DEVICE uint2 load_global_64_conditional(const void* p, bool pred) {
  uint2 r = make_uint2(0, 0);
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %3, 0;\n"
               " @q ld.global.v2.b32 {%0, %1}, [%2];\n}\n"
               : "+r"(r.x), "+r"(r.y) : "l"(p), "r"(static_cast<int>(pred)) : "memory");
  return r;
}
TL_DEVICE uint4 load_global_128_conditional(const void* p, bool pred) {
  uint4 r = make_uint4(0, 0, 0, 0);
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n"
               " @q ld.global.v4.b32 {%0, %1, %2, %3}, [%4];\n}\n"
               : "+r"(r.x), "+r"(r.y), "+r"(r.z), "+r"(r.w)
               : "l"(p), "r"(static_cast<int>(pred)) : "memory");
  return r;
}

// global stores -----------------------------------------------------------------------------
TL_DEVICE void store_global_32(void* p, uint32_t v) {
  asm volatile("st.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
TL_DEVICE void store_global_64(void* p, uint2 v) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(p), "r"(v.x), "r"(v.y) : "memory");
}
TL_DEVICE void store_global_128(void* p, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n"
               ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
TL_DEVICE void store_global_32_conditional(void* p, uint32_t v, bool pred) {
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n @q st.global.b32 [%0], %1;\n}\n"
               ::"l"(p), "r"(v), "r"(static_cast<int>(pred)) : "memory");
}
TL_DEVICE void store_global_64_conditional(void* p, uint2 v, bool pred) {
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %3, 0;\n"
               " @q st.global.v2.b32 [%0], {%1, %2};\n}\n"
               ::"l"(p), "r"(v.x), "r"(v.y), "r"(static_cast<int>(pred)) : "memory");
}
TL_DEVICE void store_global_128_conditional(void* p, uint4 v, bool pred) {
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n"
               " @q st.global.v4.b32 [%0], {%1, %2, %3, %4};\n}\n"
               ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(static_cast<int>(pred))
               : "memory");
}

// 256 bits: one v8 access on sm_100 and later (PTX 8.8), two 128-bit accesses before ------
TL_DEVICE ulonglong4 load_global_256(const void* p) {
  ulonglong4 r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  asm volatile("ld.global.v4.b64 {%0, %1, %2, %3}, [%4];\n"
               : "=l"(r.x), "=l"(r.y), "=l"(r.z), "=l"(r.w) : "l"(p) : "memory");
#else
  const uint4 lo = load_global_128(p), hi = load_global_128(static_cast<const char*>(p) + 16);
  r.x = (static_cast<unsigned long long>(lo.y) << 32) | lo.x;
  r.y = (static_cast<unsigned long long>(lo.w) << 32) | lo.z;
  r.z = (static_cast<unsigned long long>(hi.y) << 32) | hi.x;
  r.w = (static_cast<unsigned long long>(hi.w) << 32) | hi.z;
#endif
  return r;
}
TL_DEVICE ulonglong4 load_global_256_conditional(const void* p, bool pred) {
  return pred ? load_global_256(p) : make_ulonglong4(0, 0, 0, 0);
}
TL_DEVICE void store_global_256(void* p, ulonglong4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
  asm volatile("st.global.v4.b64 [%0], {%1, %2, %3, %4};\n"
               ::"l"(p), "l"(v.x), "l"(v.y), "l"(v.z), "l"(v.w) : "memory");
#else
  store_global_128(p, make_uint4(static_cast<uint32_t>(v.x), static_cast<uint32_t>(v.x >> 32),
                                 static_cast<uint32_t>(v.y), static_cast<uint32_t>(v.y >> 32)));
  store_global_128(static_cast<char*>(p) + 16,
                   make_uint4(static_cast<uint32_t>(v.z), static_cast<uint32_t>(v.z >> 32),
                              static_cast<uint32_t>(v.w), static_cast<uint32_t>(v.w >> 32)));
#endif
}
TL_DEVICE void store_global_256_conditional(void* p, ulonglong4 v, bool pred) {
  if (pred) store_global_256(p, v);
}

// shared memory -----------------------------------------------------------------------------
TL_DEVICE uint32_t load_shared_32(const void* p) {
  uint32_t r;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(r) : "r"(smem_addr(p)) : "memory");
  return r;
}
TL_DEVICE uint2 load_shared_64(const void* p) {
  uint2 r;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n"
               : "=r"(r.x), "=r"(r.y) : "r"(smem_addr(p)) : "memory");
  return r;
}
TL_DEVICE uint4 load_shared_128(const void* p) {
  uint4 r;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(smem_addr(p)) : "memory");
  return r;
}
TL_DEVICE void store_shared_32(void* p, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(smem_addr(p)), "r"(v) : "memory");
}
TL_DEVICE void store_shared_64(void* p, uint2 v) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(smem_addr(p)), "r"(v.x), "r"(v.y)
               : "memory");
}
TL_DEVICE void store_shared_128(void* p, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n"
               ::"r"(smem_addr(p)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

}  // namespace tl
