#include "gpu/float_convert.cuh"
#include "gpu/rope_angles.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace engram::gpu {
namespace {

// One thread per (position, i < d/2): both halves of the row get the same angle's values.
template <typename T>
__global__ void rope_angles_kernel(const int64_t* positions, const float* inv_freq, T* cos_out,
                                   T* sin_out, int64_t count, int64_t half) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= count * half) return;
  const int64_t n = idx / half, i = idx % half;
  // __fmul_rn: never contracted into the range reduction inside cosf / sinf.
  const float angle = __fmul_rn(static_cast<float>(positions[n]), inv_freq[i]);
  const T c = from_f<T>(cosf(angle)), s = from_f<T>(sinf(angle));
  T* c_row = cos_out + n * 2 * half;
  T* s_row = sin_out + n * 2 * half;
  c_row[i] = c_row[i + half] = c;
  s_row[i] = s_row[i + half] = s;
}

template <typename T>
void launch(const at::Tensor& positions, const at::Tensor& inv_freq, at::Tensor& cos,
            at::Tensor& sin) {
  const int64_t count = positions.numel(), half = inv_freq.numel();
  const int threads = 256;
  const int64_t blocks = (count * half + threads - 1) / threads;
  if (blocks == 0) return;
  rope_angles_kernel<T><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      positions.data_ptr<int64_t>(), inv_freq.data_ptr<float>(),
      reinterpret_cast<T*>(cos.data_ptr()), reinterpret_cast<T*>(sin.data_ptr()), count, half);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

std::pair<at::Tensor, at::Tensor> rope_angles_cuda(const at::Tensor& positions_in,
                                                   const at::Tensor& inv_freq_in,
                                                   at::ScalarType dtype) {
  const at::Tensor positions = positions_in.contiguous();
  const at::Tensor inv_freq = inv_freq_in.contiguous();
  const int64_t b = positions.size(0), s = positions.size(1), d = 2 * inv_freq.numel();
  const auto opts = positions.options().dtype(dtype);
  at::Tensor cos = at::empty({b, 1, s, d}, opts), sin = at::empty({b, 1, s, d}, opts);
  switch (dtype) {
    case at::kFloat:
      launch<float>(positions, inv_freq, cos, sin);
      break;
    case at::kBFloat16:
      launch<__nv_bfloat16>(positions, inv_freq, cos, sin);
      break;
    default:
      launch<__half>(positions, inv_freq, cos, sin);
      break;
  }
  return {cos, sin};
}

}  // namespace engram::gpu
