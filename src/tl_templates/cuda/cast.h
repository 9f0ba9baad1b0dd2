// Paired element conversions: a cast of a vector of 2, 4, ... lanes converts two lanes per
// instruction (cvt.rn.f16x2.f32, cvt.rn.satfinite.e4m3x2.f32, ...) instead of one lane at a
// time. tilelang.device.casts names the conversion of each (source, destination) pair; the
// generated code calls tl::cvt_pair<Conversion, CompileTimeArgs...>(&dst[i], src_pair).
//
// Every conversion here rounds and saturates exactly as the scalar cast of the same types in
// generated code does (the constructors of cuda_fp16 / cuda_bf16 / cuda_fp8): to nearest even;
// float8 results saturate to the largest finite value (__NV_SATFINITE, also for +-inf), NaN
// stays NaN; e8m0 results round up (cudaRoundPosInf) and saturate. Widening conversions are
// exact.
#pragma once
#include "common.h"
#include <cuda_fp8.h>

namespace tl {

// Stores Cvt(x, Args...) (one pair conversion: 2 source values in, 2 destination values out)
// into dst[0] and dst[1]. dst is aligned to the pair: it comes from a vector access.
template <auto Cvt, auto... Args, typename Dst, typename Src>
TL_DEVICE void cvt_pair(Dst* dst, const Src& x) {
  auto r = Cvt(x, Args...);
  static_assert(sizeof(r) == 2 * sizeof(Dst), "a pair conversion yields two elements");
  *reinterpret_cast<decltype(r)*>(dst) = r;
}

// The struct generated code names a pair of float8 values of kind K by.
template <__nv_fp8_interpretation_t K>
struct fp8x2;
template <>
struct fp8x2<__NV_E4M3> {
  using type = __nv_fp8x2_e4m3;
};
template <>
struct fp8x2<__NV_E5M2> {
  using type = __nv_fp8x2_e5m2;
};

}  // namespace tl

// float8 (e4m3 / e5m2) <-> half, float, bfloat16 -----------------------------------------------
template <__nv_fp8_interpretation_t K>
TL_DEVICE __half2 __tl_cvt_fp8x2_to_half2(const typename tl::fp8x2<K>::type x) {
  return __half2(__nv_cvt_fp8x2_to_halfraw2(x.__x, K));
}

template <__nv_fp8_interpretation_t K>
TL_DEVICE float2 __tl_cvt_fp8x2_to_float2(const typename tl::fp8x2<K>::type x) {
  return __half22float2(__tl_cvt_fp8x2_to_half2<K>(x));  // both steps are exact
}

template <__nv_fp8_interpretation_t K>
TL_DEVICE __nv_fp8x2_storage_t __tl_cvt_half2_to_fp8x2(const __half2 x) {
  return __nv_cvt_halfraw2_to_fp8x2(static_cast<__half2_raw>(x), __NV_SATFINITE, K);
}

template <__nv_fp8_interpretation_t K>
TL_DEVICE __nv_fp8x2_storage_t __tl_cvt_bfloat162_to_fp8x2(const __nv_bfloat162 x) {
  return __nv_cvt_bfloat16raw2_to_fp8x2(static_cast<__nv_bfloat162_raw>(x), __NV_SATFINITE, K);
}

// float8 -> bfloat16 is exact through float (every e4m3 / e5m2 value is a bfloat16 value)
TL_DEVICE __nv_bfloat162 __tl_cvt_e4m3x2_to_bfloat162(const __nv_fp8x2_e4m3 x) {
  return __float22bfloat162_rn(__tl_cvt_fp8x2_to_float2<__NV_E4M3>(x));
}

TL_DEVICE __nv_bfloat162 __tl_cvt_e5m2x2_to_bfloat162(const __nv_fp8x2_e5m2 x) {
  return __float22bfloat162_rn(__tl_cvt_fp8x2_to_float2<__NV_E5M2>(x));
}

// e8m0 (power-of-two scale factors, CUDA 12.8+) ------------------------------------------------
#if defined(__CUDACC_VER_MAJOR__) && \
    (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8))
TL_DEVICE __nv_bfloat162 __tl_cvt_e8m0x2_to_bfloat162(const __nv_fp8x2_e8m0 x) {
  return __nv_bfloat162(__nv_cvt_e8m0x2_to_bf162raw(x.__x));
}

TL_DEVICE __nv_fp8x2_storage_t __tl_cvt_bfloat162_to_e8m0x2(const __nv_bfloat162 x) {
  return __nv_cvt_bfloat162raw_to_e8m0x2(static_cast<__nv_bfloat162_raw>(x), __NV_SATFINITE,
                                         cudaRoundPosInf);
}

TL_DEVICE __nv_fp8x2_storage_t __tl_cvt_float2_to_e8m0x2(const float2 x) {
  return __nv_cvt_float2_to_e8m0x2(x, __NV_SATFINITE, cudaRoundPosInf);
}

TL_DEVICE __nv_fp8x2_storage_t __tl_cvt_double2_to_e8m0x2(const double2 x) {
  return __nv_cvt_double2_to_e8m0x2(x, __NV_SATFINITE, cudaRoundPosInf);
}
#endif
