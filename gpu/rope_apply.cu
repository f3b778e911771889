#include "gpu/float_convert.cuh"
#include "gpu/rope_apply.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>

namespace engram::gpu {
namespace {

// v rounded to T, as a torch op over T tensors stores its f32 result.
template <typename T>
__device__ inline float rounded(float v) {
  return to_f(from_f<T>(v));
}

// One thread per (row, pair): row = (b, h, s), pair i pairs dimension i with i + half. The _rn
// intrinsics keep the compiler from contracting a product and the sum into one FMA (one
// rounding where the expression has two).
template <typename T>
__global__ void rope_apply_kernel(const T* x, const T* cos, const T* sin, T* out, int64_t heads,
                                  int64_t tokens, int64_t half, int64_t x_b, int64_t x_h,
                                  int64_t x_s, int64_t c_b, int64_t c_s, int64_t o_b, int64_t o_h,
                                  int64_t o_s, int64_t pairs) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= pairs) return;
  const int64_t i = idx % half;
  const int64_t row = idx / half;
  const int64_t s = row % tokens;
  const int64_t h = (row / tokens) % heads;
  const int64_t b = row / (tokens * heads);
  const T* xr = x + b * x_b + h * x_h + s * x_s;
  const T* cr = cos + b * c_b + s * c_s;
  const T* sr = sin + b * c_b + s * c_s;
  const float x1 = to_f(xr[i]), x2 = to_f(xr[i + half]);
  // rotate_half(x) = cat(-x2, x1)
  const float lo =
      __fadd_rn(rounded<T>(__fmul_rn(x1, to_f(cr[i]))), rounded<T>(__fmul_rn(-x2, to_f(sr[i]))));
  const float hi = __fadd_rn(rounded<T>(__fmul_rn(x2, to_f(cr[i + half]))),
                             rounded<T>(__fmul_rn(x1, to_f(sr[i + half]))));
  T* o = out + b * o_b + h * o_h + s * o_s;
  o[i] = from_f<T>(lo);
  o[i + half] = from_f<T>(hi);
}

template <typename T>
void launch(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& out) {
  const int64_t half = x.size(3) / 2;
  const int64_t pairs = x.size(0) * x.size(1) * x.size(2) * half;
  if (pairs == 0) return;
  const int threads = 256;
  const int64_t blocks = (pairs + threads - 1) / threads;
  const int64_t c_b = cos.size(0) == 1 ? 0 : cos.stride(0);
  rope_apply_kernel<T><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const T*>(x.data_ptr()), reinterpret_cast<const T*>(cos.data_ptr()),
      reinterpret_cast<const T*>(sin.data_ptr()), reinterpret_cast<T*>(out.data_ptr()), x.size(1),
      x.size(2), half, x.stride(0), x.stride(1), x.stride(2), c_b, cos.stride(2), out.stride(0),
      out.stride(1), out.stride(2), pairs);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor rope_apply_cuda(const at::Tensor& x_in, const at::Tensor& cos_in,
                           const at::Tensor& sin_in) {
  const at::Tensor x = x_in.stride(3) == 1 ? x_in : x_in.contiguous();
  const at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
  // The layout torch's expression gives its result: a view of the QKV projection ([B, S, H, d]
  // in memory) keeps that order. Attention reads q in it; the same layout keeps its arithmetic
  // (and so transformers' logits) unchanged bit for bit.
  at::Tensor out =
      x.stride(1) < x.stride(2)
          ? at::empty({x.size(0), x.size(2), x.size(1), x.size(3)}, x.options()).transpose(1, 2)
          : at::empty(x.sizes(), x.options());
  switch (x.scalar_type()) {
    case at::kFloat:
      launch<float>(x, cos, sin, out);
      break;
    case at::kBFloat16:
      launch<__nv_bfloat16>(x, cos, sin, out);
      break;
    case at::kHalf:
      launch<__half>(x, cos, sin, out);
      break;
    default:
      throw std::invalid_argument("rope_apply: x must be f32, bf16 or f16");
  }
  return out;
}

}  // namespace engram::gpu
