#include "gpu/rms_norm.h"
#include "gpu/rms_norm_row.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>

namespace engram::gpu {
namespace {

constexpr int kThreads = kRmsNormThreads;

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
  const float scale = rsqrtf(rms_block_sum(sum) * (1.f / static_cast<float>(n)) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    dst[i] = rms_normed<T>(to_f(row[i]), to_f(weight[i]), scale);
}

// One block per row, 16 bytes per access (n a multiple of the vector, aligned rows): the scalar
// kernel's 2-byte accesses were ~17 us a call on prefill rows of the 14B shape.
template <typename T>
__global__ void rms_norm_vec_kernel(const T* x, const T* weight, T* out, int64_t n, float eps) {
  rms_norm_row_vec<T>(x + blockIdx.x * n, weight, out + blockIdx.x * n, n, eps);
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
