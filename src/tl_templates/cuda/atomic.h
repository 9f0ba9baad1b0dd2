// Atomic read-modify-write, loads and stores of one element (or a short vector), with the
// memory orders of cuda::memory_order. Every function returns the element's previous value
// (loads: the value read).
//
// Memory orders are the numbers of cuda::memory_order (relaxed 0, consume 1, acquire 2,
// release 3, acq_rel 4, seq_cst 5), a template argument. The operation itself is a relaxed
// (strong, device-scope) atomic; ordering comes from device-scope fences around it: a fence
// before gives the release half, a fence after the acquire half, which is how the PTX memory
// model builds release and acquire patterns from relaxed operations.
#pragma once
#include "common.h"

namespace tl {

enum MemoryOrder : int {
  kRelaxed = 0, kConsume = 1, kAcquire = 2, kRelease = 3, kAcqRel = 4, kSeqCst = 5
};

template <int O>
TL_DEVICE void fence_before_atomic() {
  if constexpr (O == kRelease || O == kAcqRel || O == kSeqCst) __threadfence();
}

template <int O>
TL_DEVICE void fence_after_atomic() {
  if constexpr (O == kConsume || O == kAcquire || O == kAcqRel || O == kSeqCst) __threadfence();
}

// relaxed max/min ----------------------------------------------------------------------------
// Integers have the hardware instruction; floats go through a compare-and-swap loop on their
// bits, which stops as soon as the stored value already wins.
TL_DEVICE int raw_max(int* a, int v) { return atomicMax(a, v); }
TL_DEVICE int raw_min(int* a, int v) { return atomicMin(a, v); }
TL_DEVICE unsigned raw_max(unsigned* a, unsigned v) { return atomicMax(a, v); }
TL_DEVICE unsigned raw_min(unsigned* a, unsigned v) { return atomicMin(a, v); }
TL_DEVICE long long raw_max(long long* a, long long v) { return atomicMax(a, v); }
TL_DEVICE long long raw_min(long long* a, long long v) { return atomicMin(a, v); }
TL_DEVICE unsigned long long raw_max(unsigned long long* a, unsigned long long v) {
  return atomicMax(a, v);
}
TL_DEVICE unsigned long long raw_min(unsigned long long* a, unsigned long long v) {
  return atomicMin(a, v);
}

template <bool MAX>
TL_DEVICE float cas_extreme(float* addr, float v) {
  int* p = reinterpret_cast<int*>(addr);
  int old = *p;
  while (MAX ? __int_as_float(old) < v : __int_as_float(old) > v) {
    int prev = atomicCAS(p, old, __float_as_int(v));
    if (prev == old) break;
    old = prev;
  }
  return __int_as_float(old);
}

template <bool MAX>
TL_DEVICE double cas_extreme(double* addr, double v) {
  unsigned long long* p = reinterpret_cast<unsigned long long*>(addr);
  unsigned long long old = *p;
  while (MAX ? __longlong_as_double(old) < v : __longlong_as_double(old) > v) {
    unsigned long long prev = atomicCAS(p, old, __double_as_longlong(v));
    if (prev == old) break;
    old = prev;
  }
  return __longlong_as_double(old);
}

template <bool MAX>
TL_DEVICE half cas_extreme(half* addr, half v) {
  unsigned short* p = reinterpret_cast<unsigned short*>(addr);
  unsigned short old = *p;
  while (MAX ? __hlt(__ushort_as_half(old), v) : __hgt(__ushort_as_half(old), v)) {
    unsigned short prev = atomicCAS(p, old, __half_as_ushort(v));
    if (prev == old) break;
    old = prev;
  }
  return __ushort_as_half(old);
}

template <bool MAX>
TL_DEVICE __nv_bfloat16 cas_extreme(__nv_bfloat16* addr, __nv_bfloat16 v) {
  unsigned short* p = reinterpret_cast<unsigned short*>(addr);
  unsigned short old = *p;
  while (MAX ? __hlt(__ushort_as_bfloat16(old), v) : __hgt(__ushort_as_bfloat16(old), v)) {
    unsigned short prev = atomicCAS(p, old, __bfloat16_as_ushort(v));
    if (prev == old) break;
    old = prev;
  }
  return __ushort_as_bfloat16(old);
}

TL_DEVICE float raw_max(float* a, float v) { return cas_extreme<true>(a, v); }
TL_DEVICE float raw_min(float* a, float v) { return cas_extreme<false>(a, v); }
TL_DEVICE double raw_max(double* a, double v) { return cas_extreme<true>(a, v); }
TL_DEVICE double raw_min(double* a, double v) { return cas_extreme<false>(a, v); }
TL_DEVICE half raw_max(half* a, half v) { return cas_extreme<true>(a, v); }
TL_DEVICE half raw_min(half* a, half v) { return cas_extreme<false>(a, v); }
TL_DEVICE __nv_bfloat16 raw_max(__nv_bfloat16* a, __nv_bfloat16 v) {
  return cas_extreme<true>(a, v);
}
TL_DEVICE __nv_bfloat16 raw_min(__nv_bfloat16* a, __nv_bfloat16 v) {
  return cas_extreme<false>(a, v);
}

// Where an operation's result goes when the statement that uses it is a call.
template <typename T>
TL_DEVICE void store_to(T* p, T v) { *p = v; }

// the ordered scalar operations ---------------------------------------------------------------
template <typename T>
TL_DEVICE T raw_add(T* a, T v) { return atomicAdd(a, v); }
TL_DEVICE long long raw_add(long long* a, long long v) {  // two's complement: same bits
  return static_cast<long long>(atomicAdd(reinterpret_cast<unsigned long long*>(a),
                                          static_cast<unsigned long long>(v)));
}

// an atomic issued between the fences its memory order asks for; its old value
template <int O, typename F>
TL_DEVICE auto ordered(F issue) {
  fence_before_atomic<O>();
  auto old = issue();
  fence_after_atomic<O>();
  return old;
}

template <int O = kRelaxed, typename T>
TL_DEVICE T atomic_add(T* addr, T v) { return ordered<O>([=] { return raw_add(addr, v); }); }

template <int O = kRelaxed, typename T>
TL_DEVICE T atomic_max(T* addr, T v) { return ordered<O>([=] { return raw_max(addr, v); }); }

template <int O = kRelaxed, typename T>
TL_DEVICE T atomic_min(T* addr, T v) { return ordered<O>([=] { return raw_min(addr, v); }); }

// A volatile access is a strong (relaxed, system-scope) one in the PTX memory model.
template <int O = kSeqCst, typename T>
TL_DEVICE T atomic_load(const T* addr) {
  if constexpr (O == kSeqCst) __threadfence();
  T v = *const_cast<const volatile T*>(addr);
  fence_after_atomic<O>();
  return v;
}

template <int O = kSeqCst, typename T>
TL_DEVICE T atomic_store(T* addr, T v) {
  fence_before_atomic<O>();
  *const_cast<volatile T*>(addr) = v;
  if constexpr (O == kSeqCst) __threadfence();
  return v;
}

// vector adds: 2 or 4 consecutive elements -----------------------------------------------------
// One packed instruction where the hardware has it and the address is aligned to the whole
// vector (half2 and bfloat162: 4 bytes; float2 / float4 on sm_90: 8 / 16 bytes); otherwise
// element by element. Either way each element is added exactly once.
TL_DEVICE bool aligned_to(const void* p, unsigned bytes) {
  return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0;
}

template <typename T>
TL_DEVICE void raw_add2(T* addr, T a, T b) {
  atomicAdd(addr, a);
  atomicAdd(addr + 1, b);
}

TL_DEVICE void raw_add2(half* addr, half a, half b) {
  if (aligned_to(addr, 4)) {
    atomicAdd(reinterpret_cast<half2*>(addr), __halves2half2(a, b));
  } else {
    atomicAdd(addr, a);
    atomicAdd(addr + 1, b);
  }
}

TL_DEVICE void raw_add2(__nv_bfloat16* addr, __nv_bfloat16 a, __nv_bfloat16 b) {
  if (aligned_to(addr, 4)) {
    atomicAdd(reinterpret_cast<__nv_bfloat162*>(addr), __halves2bfloat162(a, b));
  } else {
    atomicAdd(addr, a);
    atomicAdd(addr + 1, b);
  }
}

TL_DEVICE void raw_add2(float* addr, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (aligned_to(addr, 8)) {
    atomicAdd(reinterpret_cast<float2*>(addr), make_float2(a, b));
    return;
  }
#endif
  atomicAdd(addr, a);
  atomicAdd(addr + 1, b);
}

template <typename T>
TL_DEVICE void raw_add4(T* addr, T a, T b, T c, T d) {
  raw_add2(addr, a, b);
  raw_add2(addr + 2, c, d);
}

TL_DEVICE void raw_add4(float* addr, float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (aligned_to(addr, 16)) {
    atomicAdd(reinterpret_cast<float4*>(addr), make_float4(a, b, c, d));
    return;
  }
#endif
  raw_add2(addr, a, b);
  raw_add2(addr + 2, c, d);
}

template <int O = kRelaxed, typename T>
TL_DEVICE void atomic_addx2(T* addr, T a, T b) {
  fence_before_atomic<O>();
  raw_add2(addr, a, b);
  fence_after_atomic<O>();
}

template <int O = kRelaxed, typename T>
TL_DEVICE void atomic_addx4(T* addr, T a, T b, T c, T d) {
  fence_before_atomic<O>();
  raw_add4(addr, a, b, c, d);
  fence_after_atomic<O>();
}

}  // namespace tl
