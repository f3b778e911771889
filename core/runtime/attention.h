// Scaled dot-product attention over what a KvSource returns, with masking exact by position
// and grouped-query attention without copying KV heads where it can. On torch 2.x prefill uses
// SDPA (flash / memory-efficient kernels); torch 1.13 and decode use a grouped matmul path.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <optional>
#include <vector>

#include "core/kv/kv_source.h"

namespace engram {

// true where a query at q_positions[b, s] may attend the key at key_positions[b, t]:
// 0 <= key <= query, and key > query - window when a sliding window is set. [B, 1, S, T].
at::Tensor position_mask(const at::Tensor& q_positions, const at::Tensor& key_positions,
                         std::optional<int64_t> window);

// q: [B, Hq, S, d] after RoPE; returns [B, Hq, S, d] in q's dtype.
at::Tensor attention(const at::Tensor& q, const AttendKv& kv, const at::Tensor& q_positions,
                     std::optional<int64_t> window);

// Queries at sorted positions over keys at positions 0..T-1 (an assembled prompt's rows): a
// run of queries at contiguous positions [end - count, end) sees exactly the keys [0, end), the
// last `count` of `end` keys, which is FlashAttention's own (bottom-right) causal alignment: one
// call per run needs no mask and no repeated KV heads. `first` indexes the run's first query.
struct QueryRun {
  int64_t first = 0, count = 0, end = 0;
};
std::vector<QueryRun> query_runs(const std::vector<int64_t>& sorted_positions);
// Above this many runs (token-level selections) one masked call is cheaper than a call per run.
constexpr size_t kMaxQueryRuns = 16;
// attention() computed run by run and concatenated; kv.keys/values/key_positions cover 0..T-1
// in order (kv.mask is not read). One variable-length FlashAttention call for every run
// (cu_seqlens_k all 0, seqused_k = each run's end) was measured slower on the H100 (KEEP's
// attention 10.3 -> 14.1 ms at 40 segments): without the split over keys that the per-run calls
// get, its blocks walk up to 4K keys each. `alongside` (when set) is enqueued on a high-priority
// side stream (gpu/stream_fork.h) meanwhile, so marks it records there do not wait for the runs
// (KEEP's probes and the evidence mark after them).
at::Tensor attention_by_runs(const at::Tensor& q, const AttendKv& kv, const at::Tensor& q_positions,
                             const std::vector<QueryRun>& runs, std::optional<int64_t> window,
                             const std::function<void()>& alongside = {});

// Raw scores q·k of the given query rows against every key, before the 1/sqrt(d) scale and any
// mask: [B, Hq, R, T] in the compute dtype (tensor cores; KV heads not repeated).
at::Tensor attention_scores(const at::Tensor& q_rows, const at::Tensor& keys);

// Softmax probabilities of the given query rows against every key, f32 [B, Hq, R, T].
// Flash/SDPA kernels do not return probabilities; importance scoring needs them for a few rows
// only, so they are recomputed here for those rows (O(R·T), not O(S·T)). The scores are f32
// unless `f32_scores` is false: then in the compute dtype (tensor cores, as the eager attention
// computes them), the softmax still in f32.
at::Tensor attention_probabilities(const at::Tensor& q_rows, const AttendKv& kv,
                                   const at::Tensor& q_row_positions, std::optional<int64_t> window,
                                   bool f32_scores = true);

// For each KV head and each of the first `cached` keys, the largest attention probability that
// any query row (any query head of the group) gives it, the softmax taken over those `cached`
// keys only: f32 [B, Hkv, cached]. This is a patched prompt's attention renormalised over the
// cached tokens (EpiCache's Eq. 3), computed without materializing probabilities: the scores in
// f32 from the compute dtype's exact products, then gpu::softmax_column_max (per row the
// log-sum-exp, then the max of s - lse over rows and group heads: 3 passes over [Hkv, g·R,
// cached] on CUDA, against ~12 for attention_probabilities + renormalising). Unless `causal`, the
// rows must come after every cached key (a patch appended to the working set); the window and a
// ragged set's key_valid still mask. `causal`: the rows are among the keys (a block's last rows,
// EpiCache's snapkv window) and see those at positions up to their own. A row that sees no
// cached key contributes nothing.
at::Tensor cached_attention_max(const at::Tensor& q_rows, const AttendKv& kv,
                                const at::Tensor& q_row_positions, std::optional<int64_t> window,
                                int64_t cached, bool causal = false);

// Attention of every row of q together with its head-averaged probabilities, f32 [B, S, T], in
// one pass: scores in the compute dtype, softmax in f32, the output from those probabilities
// (the grouped path's arithmetic). For a policy that measures every recomputed row's attention
// (KEEP's unit attention) this replaces SDPA plus a second, f32 pass over the same scores.
struct AttentionWithProbabilities {
  at::Tensor out;         // [B, Hq, S, d] in q's dtype
  at::Tensor mean_probs;  // [B, S, T] f32, the mean over query heads
};
AttentionWithProbabilities attention_with_probabilities(const at::Tensor& q, const AttendKv& kv,
                                                        const at::Tensor& q_positions,
                                                        std::optional<int64_t> window);

}  // namespace engram
