#include "gpu/float_convert.cuh"
#include "gpu/rms_norm.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>

namespace engram::gpu {
namespace {

constexpr int kThreads = 256;

// The block's sum of `v`, returned to every thread.
__device__ inline float block_sum(float v) {
  __shared__ float warp_sums[kThreads / 32];
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
__device__ inline T normed(float x, float w, float scale) {
  return from_f<T>(w * rounded<T>(x * scale));
}

// One block per row.
template <typename T>
__global__ void rms_norm_kernel(const T* x, const T* weight, T* out, int64_t n, float eps) {
  const T* row = x + blockIdx.x * n;
  T* dst = out + blockIdx.x * n;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = to_f(row[i]);
    sum += v * v;
  }
  const float scale = rsqrtf(block_sum(sum) * (1.f / static_cast<float>(n)) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    dst[i] = normed<T>(to_f(row[i]), to_f(weight[i]), scale);
}

// One block per row, 16 bytes per access (n a multiple of the vector, aligned rows): the scalar
// kernel's 2-byte accesses were ~17 us a call on prefill rows of the 14B shape.
template <typename T>
__global__ void rms_norm_vec_kernel(const T* x, const T* weight, T* out, int64_t n, float eps) {
  constexpr int V = Vec16<T>::kSize;
  const T* row = x + blockIdx.x * n;
  T* dst = out + blockIdx.x * n;
  const int64_t vectors = n / V;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
    const Vec16<T> v = load16(row + i * V);
#pragma unroll
    for (int e = 0; e < V; ++e)
      sum += to_f(v.v[e]) * to_f(v.v[e]);
  }
  const float scale = rsqrtf(block_sum(sum) * (1.f / static_cast<float>(n)) + eps);
  for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
    const Vec16<T> v = load16(row + i * V), w = load16(weight + i * V);
    Vec16<T> o;
#pragma unroll
    for (int e = 0; e < V; ++e)
      o.v[e] = normed<T>(to_f(v.v[e]), to_f(w.v[e]), scale);
    store16(dst + i * V, o);
  }
}

template <typename T>
void launch(const at::Tensor& x, const at::Tensor& weight, at::Tensor& out, double eps) {
  const int64_t n = x.size(-1);
  const int64_t rows = n ? x.numel() / n : 0;
  if (rows == 0) return;
  const auto* xp = reinterpret_cast<const T*>(x.data_ptr());
  const auto* wp = reinterpret_cast<const T*>(weight.data_ptr());
  auto* op = reinterpret_cast<T*>(out.data_ptr());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (n % Vec16<T>::kSize == 0 && aligned(xp) && aligned(wp) && aligned(op)) {
    rms_norm_vec_kernel<T><<<rows, kThreads, 0, stream>>>(xp, wp, op, n, static_cast<float>(eps));
  } else {
    rms_norm_kernel<T><<<rows, kThreads, 0, stream>>>(xp, wp, op, n, static_cast<float>(eps));
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor rms_norm_cuda(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  switch (x.scalar_type()) {
    case at::kFloat:
      launch<float>(x, weight, out, eps);
      break;
    case at::kBFloat16:
      launch<__nv_bfloat16>(x, weight, out, eps);
      break;
    case at::kHalf:
      launch<__half>(x, weight, out, eps);
      break;
    default:
      throw std::invalid_argument("rms_norm: x must be f32, bf16 or f16");
  }
  return out;
}

}  // namespace engram::gpu
