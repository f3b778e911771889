// RMSNorm with torch's own reduction, for prefill on CUDA: bit-equal to rms_norm_reference (the
// transformers expression) in three launches instead of its eight. The squares are written in
// f32 as x.to(f32).pow(2) writes them, at::mean reduces them (the same kernel and order, so the
// same bits), and one kernel does the rest with the expression's rounding points: mean + eps,
// rsqrt, x·r in f32, rounded to x's dtype, times the weight, rounded. gpu::rms_norm's own
// reduction order differs in the last bit, which moved bf16 prefill logits off transformers'
// (decoder_layer.cpp); this one keeps them equal and drops five launches and ~100 MB of f32
// traffic a norm of a 2,048-token block of the 3B shape.
//
// x: [..., n] f32/bf16/f16, contiguous, n a multiple of 16 bytes' elements; weight: [n], x's
// dtype; both 16-byte aligned. Anything else runs the reference.
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

at::Tensor rms_norm_exact(const at::Tensor& x, const at::Tensor& weight, double eps);

#ifdef ENGRAM_WITH_CUDA
at::Tensor rms_norm_exact_cuda(const at::Tensor& x, const at::Tensor& weight, double eps);
#endif

}  // namespace engram::gpu
