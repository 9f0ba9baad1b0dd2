// Per-thread random numbers (T.rng_init / T.rng_rand / T.rng_rand_float), as cuRAND's device
// API gives them.  Philox4x32-10 is implemented here (no cuRAND headers needed); its state is a
// local uint32 array of tilelang's layout (tilelang/device/random.py, whose TIR form the CPU
// backend runs: both give cuRAND's stream).  XORWOW and MRG32k3a are in curand.h, which only
// the kernels using them include (cuRAND's headers take longer to compile than a kernel).
#pragma once

#include "common.h"

namespace tl {

// state words: key[2], counter[4], the counter's four outputs, position among them
enum { RNG_KEY = 0, RNG_CTR = 2, RNG_OUT = 6, RNG_POS = 10, RNG_WORDS = 13 };

TL_DEVICE void philox_refill(uint32_t* st) {
  uint32_t x = st[RNG_CTR], y = st[RNG_CTR + 1], z = st[RNG_CTR + 2], w = st[RNG_CTR + 3];
  uint32_t k0 = st[RNG_KEY], k1 = st[RNG_KEY + 1];
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0 = __umulhi(0xD2511F53u, x), lo0 = 0xD2511F53u * x;
    uint32_t hi1 = __umulhi(0xCD9E8D57u, z), lo1 = 0xCD9E8D57u * z;
    x = hi1 ^ y ^ k0;
    y = lo1;
    z = hi0 ^ w ^ k1;
    w = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  st[RNG_OUT] = x;
  st[RNG_OUT + 1] = y;
  st[RNG_OUT + 2] = z;
  st[RNG_OUT + 3] = w;
}

// curand_init(seed, seq, off): counter (off / 4, seq), position off % 4; no carried normals.
TL_DEVICE void philox_init(uint32_t* st, int* flag, unsigned long long seed,
                           unsigned long long seq, unsigned long long off) {
  unsigned long long n = off >> 2;
  st[RNG_KEY] = (uint32_t)seed;
  st[RNG_KEY + 1] = (uint32_t)(seed >> 32);
  st[RNG_CTR] = (uint32_t)n;
  st[RNG_CTR + 1] = (uint32_t)(n >> 32);
  st[RNG_CTR + 2] = (uint32_t)seq;
  st[RNG_CTR + 3] = (uint32_t)(seq >> 32);
  st[RNG_POS] = (uint32_t)(off & 3);
  flag[0] = flag[1] = 0;
  philox_refill(st);
}

// curand(&state): the next output; past the fourth the 128-bit counter advances.
TL_DEVICE uint32_t philox_next(uint32_t* st) {
  uint32_t pos = st[RNG_POS];
  uint32_t r = pos == 0 ? st[RNG_OUT] : pos == 1 ? st[RNG_OUT + 1]
             : pos == 2 ? st[RNG_OUT + 2] : st[RNG_OUT + 3];
  if (++pos == 4) {
    pos = 0;
    if (++st[RNG_CTR] == 0 && ++st[RNG_CTR + 1] == 0 && ++st[RNG_CTR + 2] == 0)
      ++st[RNG_CTR + 3];
    philox_refill(st);
  }
  st[RNG_POS] = pos;
  return r;
}

TL_DEVICE float philox_uniform(uint32_t* st) {  // (0, 1]
  return (float)philox_next(st) * 2.3283064365386963e-10f + 1.16415321826934814e-10f;
}

TL_DEVICE unsigned long long rng_bits53(uint32_t x, uint32_t y) {
  return (unsigned long long)x ^ ((unsigned long long)y << 21);
}

TL_DEVICE double philox_uniform_double(uint32_t* st) {
  uint32_t x = philox_next(st);
  uint32_t y = philox_next(st);
  return (double)rng_bits53(x, y) * 1.1102230246251565e-16 + 5.551115123125783e-17;
}

// Box-Muller: two values per pair of draws, the second returned by the next call.
TL_DEVICE float philox_normal(uint32_t* st, int* flag, float* f32) {
  if (flag[0] == 1) {
    flag[0] = 0;
    return f32[0];
  }
  uint32_t x = philox_next(st);
  uint32_t y = philox_next(st);
  float u = (float)x * 2.3283064365386963e-10f + 1.16415321826934814e-10f;
  float v = (float)y * 1.462918119976564e-09f + 7.31459059988282e-10f;
  float s = sqrtf(-2.0f * logf(u));
  f32[0] = s * cosf(v);
  flag[0] = 1;
  return s * sinf(v);
}

TL_DEVICE double philox_normal_double(uint32_t* st, int* flag, double* f64) {
  if (flag[1] == 1) {
    flag[1] = 0;
    return f64[0];
  }
  uint32_t x0 = philox_next(st), x1 = philox_next(st);
  uint32_t y0 = philox_next(st), y1 = philox_next(st);
  double u = (double)rng_bits53(x0, x1) * 1.1102230246251565e-16 + 5.551115123125783e-17;
  double v = ((double)rng_bits53(y0, y1) * 2.220446049250313e-16 + 1.1102230246251565e-16) *
             3.141592653589793;
  double s = sqrt(-2.0 * log(u));
  f64[0] = s * cos(v);
  flag[1] = 1;
  return s * sin(v);
}

}  // namespace tl
