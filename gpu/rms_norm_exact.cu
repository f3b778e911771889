#include "gpu/float_convert.cuh"
#include "gpu/rms_norm_exact.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace engram::gpu {
namespace {

constexpr int kThreads = 256;

// squares[i] = float(x[i]) · float(x[i]), rounded once (torch's pow(2) is that product), 16 bytes
// of x a thread.
template <typename T>
__global__ void squares_kernel(const T* x, float* squares, int64_t vectors) {
  constexpr int V = Vec16<T>::kSize;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= vectors) return;
  const Vec16<T> v = load16(x + i * V);
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const float f = to_f(v.v[e]);
    squares[i * V + e] = __fmul_rn(f, f);
  }
}

// out = weight · T(float(x) · rsqrt(mean + eps)), each step rounded where the expression rounds;
// 16 bytes of x a thread, n / V vectors a row.
template <typename T>
__global__ void scale_kernel(const T* x, const float* mean, const T* weight, T* out,
                             int64_t row_vectors, int64_t vectors, float eps) {
  constexpr int V = Vec16<T>::kSize;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= vectors) return;
  const int64_t row = i / row_vectors, j = i % row_vectors;
  const float r = rsqrtf(__fadd_rn(mean[row], eps));
  const Vec16<T> v = load16(x + i * V), w = load16(weight + j * V);
  Vec16<T> o;
#pragma unroll
  for (int e = 0; e < V; ++e)
    o.v[e] = from_f<T>(__fmul_rn(to_f(w.v[e]), rounded<T>(__fmul_rn(to_f(v.v[e]), r))));
  store16(out + i * V, o);
}

template <typename T>
at::Tensor run(const at::Tensor& x, const at::Tensor& weight, double eps) {
  constexpr int V = Vec16<T>::kSize;
  const int64_t n = x.size(-1), vectors = x.numel() / V;
  const int64_t blocks = (vectors + kThreads - 1) / kThreads;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  at::Tensor squares = at::empty(x.sizes(), x.options().dtype(at::kFloat));
  squares_kernel<T><<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const T*>(x.data_ptr()),
                                                     squares.data_ptr<float>(), vectors);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const at::Tensor mean = squares.mean(-1, /*keepdim=*/true).contiguous();
  at::Tensor out = at::empty_like(x);
  // The expression adds eps to an f32 tensor: the double scalar is rounded to f32 first.
  scale_kernel<T><<<blocks, kThreads, 0, stream>>>(
      reinterpret_cast<const T*>(x.data_ptr()), mean.data_ptr<float>(),
      reinterpret_cast<const T*>(weight.data_ptr()), reinterpret_cast<T*>(out.data_ptr()), n / V,
      vectors, static_cast<float>(eps));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

at::Tensor rms_norm_exact_cuda(const at::Tensor& x, const at::Tensor& weight, double eps) {
  switch (x.scalar_type()) {
    case at::kFloat:
      return run<float>(x, weight, eps);
    case at::kBFloat16:
      return run<__nv_bfloat16>(x, weight, eps);
    default:
      return run<__half>(x, weight, eps);
  }
}

}  // namespace engram::gpu
