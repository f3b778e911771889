#include "gpu/float_convert.cuh"
#include "gpu/silu_mul.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <vector>

namespace engram::gpu {
namespace {

// One thread per output element. silu as torch's CUDA kernel computes it, x / (1 + exp(-x)) in
// f32 (expf, an IEEE division), rounded to T; then the product with up, rounded to T.
template <typename T>
__global__ void silu_mul_kernel(const T* gate_up, T* out, int64_t inter, int64_t count) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= count) return;
  const int64_t row = idx / inter, j = idx % inter;
  const T* r = gate_up + row * 2 * inter;
  const float g = to_f(r[j]);
  const float silu = to_f(from_f<T>(__fdiv_rn(g, __fadd_rn(1.f, expf(-g)))));
  out[idx] = from_f<T>(__fmul_rn(silu, to_f(r[inter + j])));
}

template <typename T>
void launch(const at::Tensor& gate_up, at::Tensor& out, int64_t inter) {
  const int64_t count = out.numel();
  if (count == 0) return;
  const int threads = 256;
  const int64_t blocks = (count + threads - 1) / threads;
  silu_mul_kernel<T><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const T*>(gate_up.data_ptr()), reinterpret_cast<T*>(out.data_ptr()), inter,
      count);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor silu_mul_cuda(const at::Tensor& gate_up, int64_t inter) {
  std::vector<int64_t> shape(gate_up.sizes().begin(), gate_up.sizes().end());
  shape.back() = inter;
  at::Tensor out = at::empty(shape, gate_up.options());
  switch (gate_up.scalar_type()) {
    case at::kFloat:
      launch<float>(gate_up, out, inter);
      break;
    case at::kBFloat16:
      launch<__nv_bfloat16>(gate_up, out, inter);
      break;
    case at::kHalf:
      launch<__half>(gate_up, out, inter);
      break;
    default:
      throw std::invalid_argument("silu_mul: gate_up must be f32, bf16 or f16");
  }
  return out;
}

}  // namespace engram::gpu
