// LouisKV's two per-layer computations for one decode token (louiskv-paper §4.2, App. B), one
// launch each on CUDA. As torch ops they were ~20 small kernels per layer, which inside the
// recorded decode step cost more than the layer's attention over its region.
//
//   louiskv_decide: r = mean over query heads of cos(q_h, previous_h); decision[0] = 1 when
//     step == 0 or (stride > 0 ? step % stride == 0 : r < tau), else 0; decision[1] = r;
//     then previous = q. `step` is a one-element int64 tensor on q's device (no host sync).
//   louiskv_scores: per KV head h and unit u, the mean over h's g query heads of
//     softmax over the live units of q·index[h, u] / √d (group-consistent selection). A unit
//     that is not live scores 0.
//
// Shapes: q [Hq, d] (f32/bf16/f16, Hq = g·H), previous [Hq, d] f32, decision [2] f32,
// index [H, U, d] f32, live [U] bool or undefined (every unit). Scores are [H, U] f32.
// The CUDA kernels take d <= 256 and g <= 8 (the reference takes the rest). Each unit's softmax
// terms are summed in an order fixed by the unit's index alone, so a layer scored over a
// longer, partly dead capacity gets bit-identical scores for its live units.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace engram::gpu {

void louiskv_decide(const at::Tensor& q, at::Tensor& previous, const at::Tensor& step, double tau,
                    int64_t stride, at::Tensor& decision);
at::Tensor louiskv_scores(const at::Tensor& q, const at::Tensor& index, const at::Tensor& live);

// The reference bodies (any device, torch ops); the functions above dispatch to them off CUDA.
void louiskv_decide_reference(const at::Tensor& q, at::Tensor& previous, const at::Tensor& step,
                              double tau, int64_t stride, at::Tensor& decision);
at::Tensor louiskv_scores_reference(const at::Tensor& q, const at::Tensor& index,
                                    const at::Tensor& live);

#ifdef ENGRAM_WITH_CUDA
void louiskv_decide_cuda(const at::Tensor& q, at::Tensor& previous, const at::Tensor& step,
                         double tau, int64_t stride, at::Tensor& decision);
at::Tensor louiskv_scores_cuda(const at::Tensor& q, const at::Tensor& index,
                               const at::Tensor& live);
#endif

}  // namespace engram::gpu
