// RMSNorm as transformers' LlamaRMSNorm computes it: mean of squares and the scaling in f32,
// the normalised row cast back to x's dtype, then multiplied by the weight in that dtype. One
// kernel instead of the ~8 elementwise ops of the torch expression (decode is launch-bound).
//
// x:      [..., n], f32/bf16/f16, contiguous.
// weight: [n], x's dtype.
// Returns a new tensor shaped like x.
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The CPU reference body (any device, torch ops); rms_norm dispatches to it off CUDA.
at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps);

#ifdef ENGRAM_WITH_CUDA
at::Tensor rms_norm_cuda(const at::Tensor& x, const at::Tensor& weight, double eps);
#endif

}  // namespace engram::gpu
