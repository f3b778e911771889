// silu(gate) · up for one element, shared by gpu::silu_mul and the decode GEMV's fused gate/up
// epilogue (gpu/decode_linear.h), so that both give the bits of the torch expression.
#pragma once

#include "gpu/float_convert.cuh"

namespace engram::gpu {

// silu as torch's CUDA kernel computes it, x / (1 + exp(-x)) in f32 (expf, an IEEE division),
// rounded to T; then the product with up, rounded to T.
template <typename T>
__device__ inline T silu_times(float g, float u) {
  const float silu = rounded<T>(__fdiv_rn(g, __fadd_rn(1.f, expf(-g))));
  return from_f<T>(__fmul_rn(silu, u));
}

}  // namespace engram::gpu
