// The RoPE angles' cos and sin for a set of positions, in one kernel on CUDA with torch's
// rounding points: freqs = float(position) · inv_freq in f32, each half of d the same freqs
// ("rotate half" layout), cosf / sinf in f32, rounded once to the dtype. Bit-equal to
// Rope::cos_sin's torch expression (to, mul, cat, cos, sin and two casts: seven launches, ~10 µs
// of every recorded decode step on the H200, 2026-11-28).
//
// positions: [B, S] int64; inv_freq: [d / 2] f32, same device. Returns cos, sin [B, 1, S, d].
#pragma once

#include <ATen/ATen.h>

#include <utility>

namespace engram::gpu {

std::pair<at::Tensor, at::Tensor> rope_angles(const at::Tensor& positions,
                                              const at::Tensor& inv_freq, at::ScalarType dtype);

// The torch expression (any device); rope_angles runs it off CUDA.
std::pair<at::Tensor, at::Tensor> rope_angles_reference(const at::Tensor& positions,
                                                        const at::Tensor& inv_freq,
                                                        at::ScalarType dtype);

#ifdef ENGRAM_WITH_CUDA
std::pair<at::Tensor, at::Tensor> rope_angles_cuda(const at::Tensor& positions,
                                                   const at::Tensor& inv_freq,
                                                   at::ScalarType dtype);
#endif

}  // namespace engram::gpu
