// Atomic read-modify-write that CUDA lacks for some types (float max/min, half add).
#pragma once
#include "common.h"

namespace tl {

TL_DEVICE float atomic_max(float* addr, float v) {
  int* p = reinterpret_cast<int*>(addr);
  int old = *p;
  while (__int_as_float(old) < v) {
    int prev = atomicCAS(p, old, __float_as_int(v));
    if (prev == old) break;
    old = prev;
  }
  return __int_as_float(old);
}

TL_DEVICE float atomic_min(float* addr, float v) {
  int* p = reinterpret_cast<int*>(addr);
  int old = *p;
  while (__int_as_float(old) > v) {
    int prev = atomicCAS(p, old, __float_as_int(v));
    if (prev == old) break;
    old = prev;
  }
  return __int_as_float(old);
}

TL_DEVICE int atomic_max(int* addr, int v) { return atomicMax(addr, v); }
TL_DEVICE int atomic_min(int* addr, int v) { return atomicMin(addr, v); }

template <typename T>
TL_DEVICE T atomic_add(T* addr, T v) { return atomicAdd(addr, v); }

}  // namespace tl
