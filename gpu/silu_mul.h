// The gated MLP's activation, silu(gate) · up, from the fused gate_up projection in one kernel on
// CUDA with torch's rounding points (silu computed in f32 as torch's kernel computes it and
// rounded to the dtype, then the product rounded): bit-equal to the expression it replaces. The
// expression reads the non-contiguous halves twice and writes silu(gate) once more: ~14 ms of a
// 248 ms 4,135-token prefill of the 14B shape on the H100 (2026-11-26).
//
// gate_up: [..., 2 · inter] (gate first, then up), contiguous. Returns [..., inter].
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace engram::gpu {

at::Tensor silu_mul(const at::Tensor& gate_up, int64_t inter);

// The torch expression (any device); silu_mul runs it off CUDA.
at::Tensor silu_mul_reference(const at::Tensor& gate_up, int64_t inter);

#ifdef ENGRAM_WITH_CUDA
at::Tensor silu_mul_cuda(const at::Tensor& gate_up, int64_t inter);
#endif

}  // namespace engram::gpu
