#include "gpu/float_convert.cuh"
#include "gpu/rms_norm.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>

namespace engram::gpu {
namespace {

constexpr int kThreads = 256;

// One block per row. The rounding points are those of the torch expression: x·r rounds to T,
// then weight·(that) rounds to T.
template <typename T>
__global__ void rms_norm_kernel(const T* x, const T* weight, T* out, int64_t n, float eps) {
  const T* row = x + blockIdx.x * n;
  T* dst = out + blockIdx.x * n;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = to_f(row[i]);
    sum += v * v;
  }
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffff, sum, offset);
  __shared__ float warp_sums[kThreads / 32];
  __shared__ float scale;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    sum = lane < blockDim.x / 32 ? warp_sums[lane] : 0.f;
    for (int offset = 16; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffff, sum, offset);
    // torch's mean multiplies the sum by 1/n.
    if (lane == 0) scale = rsqrtf(sum * (1.f / static_cast<float>(n)) + eps);
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float normed = to_f(from_f<T>(to_f(row[i]) * scale));
    dst[i] = from_f<T>(to_f(weight[i]) * normed);
  }
}

template <typename T>
void launch(const at::Tensor& x, const at::Tensor& weight, at::Tensor& out, double eps) {
  const int64_t n = x.size(-1);
  const int64_t rows = n ? x.numel() / n : 0;
  if (rows == 0) return;
  rms_norm_kernel<T><<<rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const T*>(x.data_ptr()), reinterpret_cast<const T*>(weight.data_ptr()),
      reinterpret_cast<T*>(out.data_ptr()), n, static_cast<float>(eps));
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
