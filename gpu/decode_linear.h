// A linear layer for decode rows, y = x·Wᵀ (+ b), with a handful of rows (one new token per
// sequence): the product is a weight-streaming GEMV, bound by reading W once. On CUDA a kernel
// in which each warp reads whole weight rows in 16-byte loads, several in flight per lane, and
// keeps every input row's dot product in f32 registers (the input rows are re-read from L1/L2).
// cuBLAS' kernels for these shapes read the 3B shape's four projections at ~2.4 TB/s on an H100
// (83 µs a layer against 60 at the HBM rate;
// bench/results/2026-11-26-h100-epicache-evict-when-full).
//
// x:    [..., K]; w: [N, K] (torch's linear layout), x's dtype; bias: [N] or undefined.
// Returns [..., N] in x's dtype: f32 sums rounded once. Off CUDA, for more than
// kDecodeLinearMaxRows rows, or for a layout the kernel does not take (f32, K not a multiple of 8,
// unaligned rows), at::linear (and the fused steps as their own ops). H100:
// bench/results/2026-11-26-h100-decode-linear. ENGRAM_CUBLAS_DECODE=1 in the environment makes
// every call at::linear (a benchmark's peer); ENGRAM_UNFUSED_DECODE=1 runs DecodeLinearFusion's
// steps as separate kernels (the fusion's).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace engram::gpu {

inline constexpr int64_t kDecodeLinearMaxRows = 8;

// Work a decode projection folds into its kernel, each skipped when left undefined / 0. The
// result has the bits of the separate ops in this order: gpu::rms_norm(x, norm_weight, norm_eps),
// the product (+ bias), gpu::silu_mul(·, glu_inter), residual + (·). In the graph-recorded decode
// step each fold is one kernel (and one gap between kernels) less per layer.
struct DecodeLinearFusion {
  at::Tensor norm_weight;  // [K]: x is RMS-normalized first (every block normalizes its copy)
  double norm_eps = 0;
  int64_t glu_inter = 0;  // > 0: W is [gate rows; up rows] (2·glu_inter); y = silu(gate)·up
  at::Tensor residual;    // [..., N'] (N' = the output's features): added to the output

  bool folds() const { return norm_weight.defined() || glu_inter > 0 || residual.defined(); }
};

at::Tensor decode_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                         const DecodeLinearFusion& fusion = {});

// Whether decode_linear runs one kernel for these operands (CUDA builds; false elsewhere).
bool decode_linear_kernel_fits(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                               const DecodeLinearFusion& fusion = {});

#ifdef ENGRAM_WITH_CUDA
// x: [rows, K] contiguous; the result [rows, N] (N / 2 with glu_inter).
at::Tensor decode_linear_cuda(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                              const DecodeLinearFusion& fusion);
#endif

}  // namespace engram::gpu
