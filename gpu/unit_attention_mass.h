// KEEP's unit attention from raw attention scores in one kernel: for each measured query row and
// head, the softmax over the keys the row may see (keys at positions 0..T-1, row r sees t <=
// positions[r]) and the probability mass that falls in each unit's span of keys, averaged over
// heads. The torch expression (scale, mask, f32 softmax of [heads, rows, T], head mean, a sum per
// unit) reads and writes the probabilities five times; here they never leave the SM.
//
// scores:    [heads, rows, T] q·k before the 1/sqrt(d) scale, f32/bf16/f16, contiguous.
// positions: [rows] int64, each row's position (it sees keys 0..positions[r]).
// unit_begin, unit_end: [units] int64, each unit's span of keys [begin, end), in [0, T].
// Returns [rows, units] f32. Deterministic (no atomics: one warp sums one unit's span).
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

at::Tensor unit_attention_mass(const at::Tensor& scores, const at::Tensor& positions,
                               const at::Tensor& unit_begin, const at::Tensor& unit_end,
                               double scale);

// The CPU reference body (any device, torch ops); unit_attention_mass dispatches to it off CUDA.
at::Tensor unit_attention_mass_reference(const at::Tensor& scores, const at::Tensor& positions,
                                         const at::Tensor& unit_begin, const at::Tensor& unit_end,
                                         double scale);

#ifdef ENGRAM_WITH_CUDA
at::Tensor unit_attention_mass_cuda(const at::Tensor& scores, const at::Tensor& positions,
                                    const at::Tensor& unit_begin, const at::Tensor& unit_end,
                                    double scale);
#endif

}  // namespace engram::gpu
