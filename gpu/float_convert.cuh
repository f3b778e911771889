// Element conversions shared by the CUDA kernels: every kernel computes in f32 and stores in the
// tensor's dtype (f32, bf16 or f16), rounding once per store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace engram::gpu {

__device__ inline float to_f(float v) {
  return v;
}
__device__ inline float to_f(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ inline float to_f(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ inline T from_f(float v) {
  return v;
}
template <>
__device__ inline __nv_bfloat16 from_f(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ inline __half from_f(float v) {
  return __float2half(v);
}

}  // namespace engram::gpu

namespace engram::gpu {

// V elements of T loaded or stored as one 16-byte access (V = 16 / sizeof(T)); the pointer must
// be 16-byte aligned.
template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

template <typename T>
__device__ inline Vec16<T> load16(const T* p) {
  return *reinterpret_cast<const Vec16<T>*>(p);
}

template <typename T>
__device__ inline void store16(T* p, const Vec16<T>& v) {
  *reinterpret_cast<Vec16<T>*>(p) = v;
}

}  // namespace engram::gpu
