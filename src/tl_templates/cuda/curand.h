// T.rng_init(generator="curandStateXORWOW_t" / "curandStateMRG32k3a_t"): cuRAND's own device
// functions over an opaque 64-byte state (uint64[8]).  Included (through the kernel's prelude)
// only by kernels that use these generators: cuRAND's headers take longer to compile than most
// kernels do.  Without cuRAND's headers, such a kernel fails with the message below.
#pragma once

#include "common.h"

// cuRAND's other generators, over an opaque 64-byte state (uint64[8]) ----------------------
#if defined(__has_include)
#if __has_include(<curand_kernel.h>)
#include <curand_kernel.h>
#define TL_HAS_CURAND 1
#endif
#endif

#ifndef TL_HAS_CURAND
struct curandStateXORWOW_t;  // named only, so that a kernel using them gets the message below
struct curandStateMRG32k3a_t;
#endif

namespace tl {
#ifdef TL_HAS_CURAND
template <typename S>
TL_DEVICE S* rng_curand_state(void* p) {
  static_assert(sizeof(S) <= 64, "cuRAND state larger than tilelang's 64-byte slot");
  return reinterpret_cast<S*>(p);
}
template <typename S>
TL_DEVICE int rng_init(void* p, unsigned long long seed, unsigned long long seq,
                       unsigned long long off) {
  curand_init(seed, seq, off, rng_curand_state<S>(p));
  return 0;
}
template <typename S> TL_DEVICE uint32_t rng_rand(void* p) { return curand(rng_curand_state<S>(p)); }
template <typename S> TL_DEVICE float rng_uniform(void* p) { return curand_uniform(rng_curand_state<S>(p)); }
template <typename S> TL_DEVICE double rng_uniform_double(void* p) { return curand_uniform_double(rng_curand_state<S>(p)); }
template <typename S> TL_DEVICE float rng_normal(void* p) { return curand_normal(rng_curand_state<S>(p)); }
template <typename S> TL_DEVICE double rng_normal_double(void* p) { return curand_normal_double(rng_curand_state<S>(p)); }
#else
template <typename S> struct rng_needs_curand { static constexpr bool value = false; };
#define TL_RNG_MISSING(NAME, RET)                                                               \
  template <typename S>                                                                         \
  TL_DEVICE RET NAME(void*, ...) {                                                              \
    static_assert(rng_needs_curand<S>::value,                                                   \
                  "T.rng_init(generator=XORWOW or MRG32k3a) needs cuRAND's device headers "     \
                  "(curand_kernel.h) on the compiler's include path (set CUDA_HOME to a CUDA "  \
                  "toolkit that has them); the Philox generator needs none");                   \
    return RET();                                                                               \
  }
TL_RNG_MISSING(rng_init, int)
TL_RNG_MISSING(rng_rand, uint32_t)
TL_RNG_MISSING(rng_uniform, float)
TL_RNG_MISSING(rng_uniform_double, double)
TL_RNG_MISSING(rng_normal, float)
TL_RNG_MISSING(rng_normal_double, double)
#undef TL_RNG_MISSING
#endif
}  // namespace tl
