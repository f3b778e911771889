#include "gpu/float_convert.cuh"
#include "gpu/rope_rotate.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace engram::gpu {
namespace {

// One thread per (row, pair): rows = every [.., token] vector, pairs = head_dim / 2.
template <typename T>
__global__ void rope_rotate_kernel(T* keys, const int64_t* deltas, const float* inv_freq,
                                   int64_t rows, int64_t tokens, int64_t half) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= rows * half) return;
  const int64_t row = idx / half;
  const int64_t i = idx % half;
  const int64_t token = row % tokens;
  const float angle = static_cast<float>(deltas[token]) * inv_freq[i];
  float s, c;
  sincosf(angle, &s, &c);
  T* base = keys + row * 2 * half;
  const float x1 = to_f(base[i]);
  const float x2 = to_f(base[i + half]);
  base[i] = from_f<T>(x1 * c - x2 * s);
  base[i + half] = from_f<T>(x2 * c + x1 * s);
}

template <typename T>
void launch(at::Tensor& keys, const at::Tensor& deltas, const at::Tensor& inv_freq) {
  const int64_t half = keys.size(-1) / 2;
  const int64_t tokens = keys.size(-2);
  const int64_t rows = keys.numel() / keys.size(-1);
  const int64_t work = rows * half;
  if (work == 0) return;
  const int threads = 256;
  const int64_t blocks = (work + threads - 1) / threads;
  at::Tensor d = deltas.to(at::kLong).contiguous();
  at::Tensor f = inv_freq.to(at::kFloat).contiguous();
  rope_rotate_kernel<T><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<T*>(keys.data_ptr()), d.data_ptr<int64_t>(), f.data_ptr<float>(), rows,
      tokens, half);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void rope_rotate_cuda_(at::Tensor& keys, const at::Tensor& deltas, const at::Tensor& inv_freq) {
  if (!keys.is_contiguous()) throw std::invalid_argument("rope_rotate_: keys must be contiguous");
  switch (keys.scalar_type()) {
    case at::kFloat:
      launch<float>(keys, deltas, inv_freq);
      break;
    case at::kBFloat16:
      launch<__nv_bfloat16>(keys, deltas, inv_freq);
      break;
    case at::kHalf:
      launch<__half>(keys, deltas, inv_freq);
      break;
    default:
      throw std::invalid_argument("rope_rotate_: keys must be f32, bf16 or f16");
  }
}

}  // namespace engram::gpu
