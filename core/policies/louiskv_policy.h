// `louiskv`: LouisKV (louiskv-paper §4, App. B-C; DESIGN.md "LouisKV"). Prompt keys of every
// retrieval layer and KV head are clustered by spherical k-means (mean cluster size 16, ~20
// iterations) and indexed by their mean key; generated tokens form temporal segments split where
// the layer retrieved, indexed by their mean key when they leave the local window. A layer
// retrieves at the first decode step and then when r_t = mean over query heads of
// cos(q_t, q_{t-1}) falls below τ (a semantic boundary); units score by softmax(q·Cᵀ/√d) over the
// layer's units per query head, averaged over each GQA group (group-consistent selection).
//
// Engram's choices: the k-means starts from keys spread evenly over the prompt (deterministic, no
// seed to carry); `stride=N` retrieves every N steps instead (the paper's fixed-stride ablation);
// `rate=P` gives every layer its own τ, moved on the device so that the layer retrieves at about
// P % of the tokens, at its own least similar ones (engram-tiny's shallow layers turn their
// queries at almost every token and its deep ones rarely: one τ spends most retrievals on the
// former, docs/louiskv.md "The retrieval map").
#pragma once

#include <vector>

#include "core/policies/retrieval_policy.h"

namespace engram {

struct LouisKvOptions {
  double tau = 0.7;
  // The paper's τ for the request's shape instead of `tau` (the registry's default: a spec without
  // `tau=`): 0.85 for a long input (a prompt of at least kLongInputRatio times the reply's room),
  // 0.7 for a long output or both long (louiskv-paper §5: long input τ=0.85, long output 0.7).
  bool tau_by_shape = false;
  int64_t cluster_tokens = 16;
  int64_t iterations = 20;
  int64_t stride = 0;  // 0: adaptive (semantic boundaries)
  // The fewest tokens of a temporal segment when it leaves the window (`segment=N`): shorter
  // ones join the next up to a boundary (RetrievalPolicy::min_segment_tokens). 16, the paper's
  // segment size (App. D.2's s; its fixed-stride baseline for long output): engram-tiny's first
  // layers turn their queries at almost every token, and one-token units made the index grow by
  // a unit a layer and step. engram-tiny, 4 x 512 tokens, B = 256: KL 0.0015 against 0.0016 with
  // segment=1 (bench/results/2026-11-27-h100-louiskv-segments).
  int64_t min_segment_tokens = 16;
  // k-means stops once a round moves at most this many keys per thousand to another cluster
  // (`moved=P`; 0: only when none moves, the rule until 2026-11-27), or after `iterations` rounds.
  // 1 %: on the 8B shape at 32K 3 rounds a layer instead of 11, the build 379 ms instead of 855,
  // engram-tiny's fidelity unchanged (bench/results/2026-11-27-h100-louiskv-kmeans-stop).
  int64_t moved_permille = 10;
  // `rate=P`: each layer's τ starts at the request's τ and tracks the P-th percentile of the
  // layer's r_t (a quantile tracker: +gain·P/100 a step without retrieval, -gain·(1 - P/100) a
  // step with one), so each layer retrieves at ~P % of the steps. 0: one τ for every layer.
  // A layer's τ carries over to the policy's next request (a chat's next turn).
  int64_t rate_percent = 0;
  // The tracker's step: τ moves by at most this much a token (engram-tiny's r_t spreads over
  // ~0.35 between 30 % and 98 % of the steps, so from τ = 0.7 a layer settles in tens of steps).
  static constexpr double kRateGain = 0.02;
};

class LouisKvPolicy : public RetrievalPolicy {
 public:
  explicit LouisKvPolicy(LouisKvOptions options, RetrievalSettings settings);
  std::string name() const override { return "louiskv"; }
  std::string spec() const override;
  std::unique_ptr<RetrievalPolicy> clone() const override;
  void begin_decode(int64_t layers, int64_t prompt_tokens, int64_t max_new_tokens) override;
  PromptUnits prompt_units(int64_t layer, const at::Tensor& keys) override;
  // All heads in one k-means that leaves each head's hidden keys out (cluster_keys' `visible`),
  // K = the most visible keys of a head / 16 clusters each: one clustering a layer, as for a
  // uniform set (made head by head it took 0.6-0.8 s instead of 0.23 at 32K on the 8B shape).
  PromptUnits ragged_prompt_units(int64_t layer, const at::Tensor& keys,
                                  const at::Tensor& visible) override;
  at::Tensor unit_index(const at::Tensor& keys) const override;
  bool retrieve(int64_t layer, int64_t step, const at::Tensor& q) override;
  bool decides_on_device() const override { return true; }
  void retrieve_on_device(int64_t layer, const at::Tensor& step, const at::Tensor& q,
                          at::Tensor& decision) override;
  int64_t min_segment_tokens() const override { return options_.min_segment_tokens; }
  bool idle_at(int64_t step) const override {
    return options_.stride > 0 && step % options_.stride != 0;
  }
  void similarity_seen(int64_t layer, int64_t step, float similarity, bool retrieved) override;
  float last_similarity(int64_t layer) const override { return last_similarity_.at(layer); }
  float last_threshold(int64_t layer) const override {
    return last_tau_.empty() ? std::numeric_limits<float>::quiet_NaN() : last_tau_.at(layer);
  }
  // One τ for the map's tooltips; none with a fixed stride or a τ of each layer's own.
  double boundary_threshold() const override {
    return options_.stride > 0 || options_.rate_percent > 0 ? -1 : tau_;
  }
  using RetrievalPolicy::score;
  at::Tensor score(const at::Tensor& q, const at::Tensor& index, const at::Tensor& live,
                   const at::Tensor& enabled) const override;

  const LouisKvOptions& options() const { return options_; }
  // The τ of the current request (options().tau, or the one for its shape).
  double tau() const { return tau_; }
  // The layer's τ now: its own with `rate=`, else tau(). Reads the device (a sync).
  double layer_tau(int64_t layer) const;
  // The same from the host's replay of the decisions reported (no sync; NaN before the first).
  float layer_tau_on_host(int64_t layer) const { return host_tau_.at(layer); }
  static constexpr int64_t kLongInputRatio = 4;
  static constexpr double kLongInputTau = 0.85, kLongOutputTau = 0.7;
  // r_t of every (layer, step >= 1) so far, for the τ sweep and the panel.
  const std::vector<std::vector<float>>& similarities() const { return similarity_; }

 private:
  LouisKvOptions options_;
  double tau_;
  std::vector<at::Tensor> previous_q_;  // per layer [Hq, d] f32
  std::vector<at::Tensor> layer_tau_;   // per layer [1] f32 with `rate=`, beside the queries
  // With `rate=`: each layer's τ replayed on the host from the decisions reported (the device's
  // bits: the same f32 add and clamp), and the one its last decision compared with (the map's).
  std::vector<float> host_tau_, last_tau_;
  float tau_up() const;
  float tau_down() const;
  std::vector<std::vector<float>> similarity_;
  std::vector<float> last_similarity_;  // per layer, NaN until an adaptive step after the first
};

// The clustering itself, for tests and benchmarks: assignment [H, N] int64 of keys [H, N, d] into
// `clusters` clusters per head, and the final centroids [H, K, d] f32 (unit length). At most
// `iterations` rounds (update, assign); it stops after a round that moved at most
// `moved_permille` keys per thousand (0: none). `rounds` (optional) receives the rounds run.
// `visible` (optional, [H, N] bool): each head clusters only those keys, from centroids spread
// over them; its other keys get the assignment `clusters` (no cluster).
std::pair<at::Tensor, at::Tensor> cluster_keys(const at::Tensor& keys, int64_t clusters,
                                               int64_t iterations, int64_t moved_permille = 0,
                                               int64_t* rounds = nullptr,
                                               const at::Tensor& visible = {});

// Units from an assignment: pool order (by cluster, then by token), sizes, offsets, and the mean
// key of every cluster as its index (zero for an empty cluster).
PromptUnits units_from_assignment(const at::Tensor& keys, const at::Tensor& assignment,
                                  int64_t clusters);

}  // namespace engram
