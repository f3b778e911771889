// LouisKV's two per-layer computations for one decode token (louiskv-paper §4.2, App. B), shared
// by the per-layer path and the recorded decode step so that both decide and rank alike.
// louiskv_decide is one CUDA launch (as torch ops it was ~12 small kernels per layer inside the
// recorded step); louiskv_scores is two CUDA launches spread over the units (the logits a warp a
// unit, then each unit's mean softmax), which the layer's decision can switch off (the torch ops it
// replaces, now the reference, ran at every step of a recorded step whether the layer retrieved or
// not; a first fused kernel with one block per KV head had been 8x slower than them on the H100,
// bench/results/2026-11-26-h100-louiskv-recorded).
//
//   louiskv_decide: r = mean over query heads of cos(q_h, previous_h); decision[0] = 1 when
//     step == 0 or (stride > 0 ? step % stride == 0 : r < tau), else 0; decision[1] = r;
//     then previous = q. `step` is a one-element int64 tensor on q's device (no host sync).
//     With a LayerTau the layer's τ is tau.threshold (one f32 on q's device) instead of `tau`,
//     and after a compared step (step > 0, no stride) it moves by `up` when the layer did not
//     retrieve and by `down` when it did (clamped to [-1, 1.01]): a quantile tracker that holds
//     the layer's retrieval rate at `rate` with up = gain·rate, down = gain·(rate - 1).
//   louiskv_scores: per KV head h and unit u, the mean over h's g query heads of
//     softmax over the live units of q·index[h, u] / √d (group-consistent selection). A unit
//     that is not live scores 0; at least one must be live. `enabled` (optional, one bool on the
//     device): when false the CUDA kernels do nothing and the scores are unspecified (a recorded
//     step scores at every step and lets the layer's decision switch the work off, as the
//     selection and the gather do).
//
// Shapes: q [Hq, d] (f32/bf16/f16, Hq = g·H), previous [Hq, d] f32, decision [2] f32,
// index [H, U, d] any float dtype (scored in f32), live [U] bool or undefined (every unit). Scores
// are [H, U] f32. The CUDA decision takes d <= 256 (the reference takes the rest). Scores depend on
// the units' count (the softmax's reductions), so both paths score a layer over the same capacity
// (core/kv/retrieval_kv_source.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace engram::gpu {

// A layer's τ stays in [-1, kLayerTauCeiling]: above 1 every step retrieves (r <= 1).
constexpr float kLayerTauCeiling = 1.01f;

// A layer's own τ, kept on the device so that a recorded step moves it without the host.
struct LayerTau {
  at::Tensor threshold;  // [1] f32
  float up = 0, down = 0;
};

void louiskv_decide(const at::Tensor& q, at::Tensor& previous, const at::Tensor& step, double tau,
                    int64_t stride, at::Tensor& decision, const LayerTau* layer_tau = nullptr);
at::Tensor louiskv_scores(const at::Tensor& q, const at::Tensor& index, const at::Tensor& live,
                          const at::Tensor& enabled = {});
at::Tensor louiskv_scores_reference(const at::Tensor& q, const at::Tensor& index,
                                    const at::Tensor& live);

// The CUDA scores take groups of at most this many query heads a KV head and d <= 512.
constexpr int64_t kMaxScoreGroup = 16;

// The decision's reference body (any device, torch ops); louiskv_decide dispatches to it off CUDA.
void louiskv_decide_reference(const at::Tensor& q, at::Tensor& previous, const at::Tensor& step,
                              double tau, int64_t stride, at::Tensor& decision,
                              const LayerTau* layer_tau = nullptr);

#ifdef ENGRAM_WITH_CUDA
void louiskv_decide_cuda(const at::Tensor& q, at::Tensor& previous, const at::Tensor& step,
                         double tau, int64_t stride, at::Tensor& decision,
                         const LayerTau* layer_tau = nullptr);
at::Tensor louiskv_scores_cuda(const at::Tensor& q, const at::Tensor& index, const at::Tensor& live,
                               const at::Tensor& enabled);
#endif

}  // namespace engram::gpu
