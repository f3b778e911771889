// One row's RMSNorm inside a block of kRmsNormThreads threads, shared by gpu::rms_norm's kernel
// and the decode GEMV's fused prologue (gpu/decode_linear.h): both reduce in this order, so the
// fused and the separate norm give the same bits.
#pragma once

#include <cstdint>

#include "gpu/float_convert.cuh"

namespace engram::gpu {

inline constexpr int kRmsNormThreads = 256;

// The block's sum of `v`, returned to every thread (blockDim.x == kRmsNormThreads). Safe to call
// again at once: the next call's first barrier waits for every read of this call's total.
__device__ inline float rms_block_sum(float v) {
  __shared__ float warp_sums[kRmsNormThreads / 32];
  __shared__ float total;
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffff, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? warp_sums[lane] : 0.f;
    for (int offset = 16; offset > 0; offset /= 2)
      v += __shfl_xor_sync(0xffffffff, v, offset);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

// The rounding points are those of the torch expression: x·r rounds to T, then weight·(that)
// rounds to T. torch's mean multiplies the sum by 1/n.
template <typename T>
__device__ inline T rms_normed(float x, float w, float scale) {
  return from_f<T>(w * rounded<T>(x * scale));
}

// dst = RMSNorm(row) · weight over n elements in 16-byte vectors (n a multiple of the vector,
// 16-byte aligned pointers; dst may be shared memory).
template <typename T>
__device__ inline void rms_norm_row_vec(const T* row, const T* weight, T* dst, int64_t n,
                                        float eps) {
  constexpr int V = Vec16<T>::kSize;
  const int64_t vectors = n / V;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
    const Vec16<T> v = load16(row + i * V);
#pragma unroll
    for (int e = 0; e < V; ++e)
      sum += to_f(v.v[e]) * to_f(v.v[e]);
  }
  const float scale = rsqrtf(rms_block_sum(sum) * (1.f / static_cast<float>(n)) + eps);
  for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
    const Vec16<T> v = load16(row + i * V), w = load16(weight + i * V);
    Vec16<T> o;
#pragma unroll
    for (int e = 0; e < V; ++e)
      o.v[e] = rms_normed<T>(to_f(v.v[e]), to_f(w.v[e]), scale);
    store16(dst + i * V, o);
  }
}

}  // namespace engram::gpu
