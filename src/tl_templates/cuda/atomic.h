// Atomic read-modify-write, loads and stores of one element (or a short vector), with the
// memory orders of cuda::memory_order. The helpers carry the names the public TileLang
// headers give them (AtomicAdd, AtomicAddRet, AtomicAddx2, ..., AtomicOr), so that generated
// sources read the same; the memory order is the last argument, a number (relaxed 0,
// consume 1, acquire 2, release 3, acq_rel 4, seq_cst 5), a constant at every call site, so
// the branches on it fold away. `...Ret` forms return the previous value(s); the others
// return nothing.
//
// The operation itself is a relaxed (strong, device-scope) atomic; ordering comes from
// device-scope fences around it: a fence before gives the release half, a fence after the
// acquire half, which is how the PTX memory model builds release and acquire patterns from
// relaxed operations.
#pragma once
#include "common.h"

namespace tl {

enum MemoryOrder : int {
  kRelaxed = 0, kConsume = 1, kAcquire = 2, kRelease = 3, kAcqRel = 4, kSeqCst = 5
};

TL_DEVICE void fence_before_atomic(int order) {
  if (order == kRelease || order == kAcqRel || order == kSeqCst) __threadfence();
}

TL_DEVICE void fence_after_atomic(int order) {
  if (order == kConsume || order == kAcquire || order == kAcqRel || order == kSeqCst) {
    __threadfence();
  }
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

// The bits of a packed pair (4 bytes) or quad (8 bytes) of 16-bit values, as TVM's CUDA code
// types float16x2 / bfloat16x2 (uint1) and float16x4 / bfloat16x4 (uint2).
template <typename V>
TL_DEVICE uint1 to_uint1(V v) {
  static_assert(sizeof(V) == 4, "to_uint1 takes 4 bytes");
  uint1 u;
  memcpy(&u, &v, 4);
  return u;
}

template <typename V>
TL_DEVICE uint2 to_uint2(V v) {
  static_assert(sizeof(V) == 8, "to_uint2 takes 8 bytes");
  uint2 u;
  memcpy(&u, &v, 8);
  return u;
}

// relaxed add and bitwise operations ----------------------------------------------------------
template <typename T>
TL_DEVICE T raw_add(T* a, T v) { return atomicAdd(a, v); }
TL_DEVICE long long raw_add(long long* a, long long v) {  // two's complement: same bits
  return static_cast<long long>(atomicAdd(reinterpret_cast<unsigned long long*>(a),
                                          static_cast<unsigned long long>(v)));
}

#define TL_ATOMIC_BITWISE(NAME, FN)                                                         \
  TL_DEVICE int NAME(int* a, int v) { return FN(a, v); }                                    \
  TL_DEVICE unsigned NAME(unsigned* a, unsigned v) { return FN(a, v); }                     \
  TL_DEVICE unsigned long long NAME(unsigned long long* a, unsigned long long v) {          \
    return FN(a, v);                                                                        \
  }                                                                                         \
  TL_DEVICE long long NAME(long long* a, long long v) {                                     \
    return static_cast<long long>(FN(reinterpret_cast<unsigned long long*>(a),             \
                                     static_cast<unsigned long long>(v)));                  \
  }
TL_ATOMIC_BITWISE(raw_or, atomicOr)
TL_ATOMIC_BITWISE(raw_and, atomicAnd)
TL_ATOMIC_BITWISE(raw_xor, atomicXor)
#undef TL_ATOMIC_BITWISE

// int64_t and uint64_t are long and unsigned long on LP64 Linux, types apart from the
// (unsigned) long long CUDA's atomics take: the same 64-bit operations under those names
#define TL_ATOMIC_LONG(NAME)                                                                \
  TL_DEVICE long NAME(long* a, long v) {                                                    \
    return NAME(reinterpret_cast<long long*>(a), static_cast<long long>(v));                \
  }                                                                                         \
  TL_DEVICE unsigned long NAME(unsigned long* a, unsigned long v) {                         \
    return NAME(reinterpret_cast<unsigned long long*>(a), static_cast<unsigned long long>(v)); \
  }
TL_ATOMIC_LONG(raw_add)
TL_ATOMIC_LONG(raw_max)
TL_ATOMIC_LONG(raw_min)
TL_ATOMIC_LONG(raw_or)
TL_ATOMIC_LONG(raw_and)
TL_ATOMIC_LONG(raw_xor)
#undef TL_ATOMIC_LONG

// vector adds: 2 or 4 consecutive elements -----------------------------------------------------
// One packed instruction where the hardware has it and the address is aligned to the whole
// vector (half2: 4 bytes; bfloat162 on sm_80+: 4 bytes; float2 / float4 on sm_90: 8 / 16
// bytes); otherwise element by element. Either way each element is added exactly once, and the
// previous values come back in `old`.
TL_DEVICE bool aligned_to(const void* p, unsigned bytes) {
  return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0;
}

template <typename T>
TL_DEVICE void raw_add2(T* addr, T a, T b, T* old) {
  old[0] = raw_add(addr, a);
  old[1] = raw_add(addr + 1, b);
}

TL_DEVICE void raw_add2(half* addr, half a, half b, half* old) {
  if (aligned_to(addr, 4)) {
    half2 o = atomicAdd(reinterpret_cast<half2*>(addr), __halves2half2(a, b));
    old[0] = __low2half(o);
    old[1] = __high2half(o);
  } else {
    old[0] = atomicAdd(addr, a);
    old[1] = atomicAdd(addr + 1, b);
  }
}

TL_DEVICE void raw_add2(__nv_bfloat16* addr, __nv_bfloat16 a, __nv_bfloat16 b,
                        __nv_bfloat16* old) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (aligned_to(addr, 4)) {
    __nv_bfloat162 o =
        atomicAdd(reinterpret_cast<__nv_bfloat162*>(addr), __halves2bfloat162(a, b));
    old[0] = __low2bfloat16(o);
    old[1] = __high2bfloat16(o);
    return;
  }
#endif
  old[0] = atomicAdd(addr, a);
  old[1] = atomicAdd(addr + 1, b);
}

TL_DEVICE void raw_add2(float* addr, float a, float b, float* old) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (aligned_to(addr, 8)) {
    float2 o = atomicAdd(reinterpret_cast<float2*>(addr), make_float2(a, b));
    old[0] = o.x;
    old[1] = o.y;
    return;
  }
#endif
  old[0] = atomicAdd(addr, a);
  old[1] = atomicAdd(addr + 1, b);
}

template <typename T>
TL_DEVICE void raw_add4(T* addr, T a, T b, T c, T d, T* old) {
  raw_add2(addr, a, b, old);
  raw_add2(addr + 2, c, d, old + 2);
}

TL_DEVICE void raw_add4(float* addr, float a, float b, float c, float d, float* old) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (aligned_to(addr, 16)) {
    float4 o = atomicAdd(reinterpret_cast<float4*>(addr), make_float4(a, b, c, d));
    old[0] = o.x;
    old[1] = o.y;
    old[2] = o.z;
    old[3] = o.w;
    return;
  }
#endif
  raw_add2(addr, a, b, old);
  raw_add2(addr + 2, c, d, old + 2);
}

// The vector type of N elements of T that a ...Ret form returns: TVM's CUDA type for the
// TIR dtype T x N (float2, float4; 16-bit pairs and quads travel as half2 / __nv_bfloat162
// and pairs of them, which to_uint1 / to_uint2 turn into TVM's uint1 / uint2).
template <typename T, int N> struct vec_of;
template <> struct vec_of<float, 2> { using type = float2; };
template <> struct vec_of<float, 4> { using type = float4; };
template <> struct vec_of<half, 2> { using type = half2; };
template <> struct vec_of<__nv_bfloat16, 2> { using type = __nv_bfloat162; };
template <> struct vec_of<half, 4> { struct type { half2 lo, hi; }; };
template <> struct vec_of<__nv_bfloat16, 4> { struct type { __nv_bfloat162 lo, hi; }; };

template <typename T, int N>
TL_DEVICE typename vec_of<T, N>::type pack(const T* v) {
  typename vec_of<T, N>::type out;
  static_assert(sizeof(out) == N * sizeof(T), "packed vector of N elements");
  memcpy(&out, v, sizeof(out));
  return out;
}

// an atomic issued between the fences its memory order asks for; its old value
template <typename F>
TL_DEVICE auto ordered(int order, F issue) {
  fence_before_atomic(order);
  auto old = issue();
  fence_after_atomic(order);
  return old;
}

}  // namespace tl

// the public helpers -------------------------------------------------------------------------
// `value` is converted to the element type first (the generated code already passes it so).
#define TL_ATOMIC_PUBLIC(NAME, RAW)                                                         \
  template <typename T, typename V>                                                         \
  TL_DEVICE T NAME##Ret(T* addr, V value, int order = tl::kRelaxed) {                       \
    T v = static_cast<T>(value);                                                            \
    return tl::ordered(order, [=] { return tl::RAW(addr, v); });                            \
  }                                                                                         \
  template <typename T, typename V>                                                         \
  TL_DEVICE void NAME(T* addr, V value, int order = tl::kRelaxed) {                         \
    (void)NAME##Ret(addr, value, order);                                                    \
  }
TL_ATOMIC_PUBLIC(AtomicAdd, raw_add)
TL_ATOMIC_PUBLIC(AtomicMax, raw_max)
TL_ATOMIC_PUBLIC(AtomicMin, raw_min)
TL_ATOMIC_PUBLIC(AtomicOr, raw_or)
TL_ATOMIC_PUBLIC(AtomicAnd, raw_and)
TL_ATOMIC_PUBLIC(AtomicXor, raw_xor)
#undef TL_ATOMIC_PUBLIC

// A volatile access is a strong (relaxed, system-scope) one in the PTX memory model.
template <typename T>
TL_DEVICE T AtomicLoad(const T* addr, int order = tl::kSeqCst) {
  if (order == tl::kSeqCst) __threadfence();
  T v = *const_cast<const volatile T*>(addr);
  tl::fence_after_atomic(order);
  return v;
}

template <typename T, typename V>
TL_DEVICE void AtomicStore(T* addr, V value, int order = tl::kSeqCst) {
  tl::fence_before_atomic(order);
  *const_cast<volatile T*>(addr) = static_cast<T>(value);
  if (order == tl::kSeqCst) __threadfence();
}

template <typename T>
TL_DEVICE typename tl::vec_of<T, 2>::type AtomicAddx2Ret(T* addr, T a, T b,
                                                          int order = tl::kRelaxed) {
  T old[2];
  tl::fence_before_atomic(order);
  tl::raw_add2(addr, a, b, old);
  tl::fence_after_atomic(order);
  return tl::pack<T, 2>(old);
}

template <typename T>
TL_DEVICE typename tl::vec_of<T, 4>::type AtomicAddx4Ret(T* addr, T a, T b, T c, T d,
                                                          int order = tl::kRelaxed) {
  T old[4];
  tl::fence_before_atomic(order);
  tl::raw_add4(addr, a, b, c, d, old);
  tl::fence_after_atomic(order);
  return tl::pack<T, 4>(old);
}

template <typename T>
TL_DEVICE void AtomicAddx2(T* addr, T a, T b, int order = tl::kRelaxed) {
  T old[2];
  tl::fence_before_atomic(order);
  tl::raw_add2(addr, a, b, old);
  tl::fence_after_atomic(order);
}

template <typename T>
TL_DEVICE void AtomicAddx4(T* addr, T a, T b, T c, T d, int order = tl::kRelaxed) {
  T old[4];
  tl::fence_before_atomic(order);
  tl::raw_add4(addr, a, b, c, d, old);
  tl::fence_after_atomic(order);
}

namespace tl {
// Where a vector result goes: its bytes, stored from p on (p: per-thread elements).
template <typename T, typename V>
TL_DEVICE void store_bits(T* p, V v) {
  memcpy(p, &v, sizeof(V));
}
}  // namespace tl
