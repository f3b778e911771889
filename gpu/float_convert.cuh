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

// v rounded to T and back, as a torch op over T tensors stores its f32 result.
template <typename T>
__device__ inline float rounded(float v) {
  return to_f(from_f<T>(v));
}

// One element of RoPE as torch's expression x·cos + rotate_half(x)·sin computes it: each product
// rounded to T, then the sum (`partner` is -x[i + half] below half, x[i - half] above). The _rn
// intrinsics keep the compiler from fusing a product and the sum into one FMA.
template <typename T>
__device__ inline T rope_element(float x, float partner, float c, float s) {
  return from_f<T>(__fadd_rn(rounded<T>(__fmul_rn(x, c)), rounded<T>(__fmul_rn(partner, s))));
}

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

// Four f32 at p (16-byte aligned) in one load.
__device__ inline void load4(const float* p, float* o) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  o[0] = v.x;
  o[1] = v.y;
  o[2] = v.z;
  o[3] = v.w;
}

// The eight 16-bit floats of a 16-byte vector as f32 (the pointer argument only picks the type).
__device__ inline void widen8(const uint4& v, const __nv_bfloat16*, float* o) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    o[2 * i] = f.x;
    o[2 * i + 1] = f.y;
  }
}
__device__ inline void widen8(const uint4& v, const __half*, float* o) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    o[2 * i] = f.x;
    o[2 * i + 1] = f.y;
  }
}

}  // namespace engram::gpu
