// RoPE as transformers applies it, x·cos + rotate_half(x)·sin, in one kernel on CUDA with the
// expression's rounding points (each product rounded to x's dtype, then their sum rounded), so it
// is bit-equal to the torch expression it replaces and the plain prefill stays bit-equal to
// transformers. The expression is a neg, a cat, two products and a sum over [B, H, S, d]: 21 ms
// of a 248 ms 4,135-token prefill of the 14B shape on the H100 (2026-11-26).
//
// x:        [B, H, S, d], the last dimension contiguous (a view of the QKV projection).
// cos, sin: [B or 1, 1, S, d] in x's dtype (Rope::cos_sin).
// Returns [B, H, S, d] in x's dtype, laid out as the expression lays out its result: [B, S, H, d]
// in memory for a view of the projection, contiguous otherwise.
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

at::Tensor rope_apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// The torch expression (any device); rope_apply runs it off CUDA.
at::Tensor rope_apply_reference(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

#ifdef ENGRAM_WITH_CUDA
at::Tensor rope_apply_cuda(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
#endif

}  // namespace engram::gpu
