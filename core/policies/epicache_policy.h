// `epicache`: EpiCache's block prefill eviction (Kim et al., 2025, arXiv:2509.17396, §2.2 Eq. 3
// and §3.1 Stage 2; DESIGN.md "EpiCache"). After each prefill block that passes the budget the
// runner forwards a patched prompt (MemoryPolicy::patch_tokens) at the positions after it; every
// cached token is scored per KV head by the maximum, over the patch's rows and the query heads of
// that KV head, of the softmax attention it receives (softmax over the cached keys only, i.e. the
// probabilities renormalised without the patch's own columns); each (layer, KV head) keeps its
// top-scored tokens. The patch's KV is dropped before the shrink. One policy instance builds one
// episode's cache: the caller (eval conversation) clusters the history (episode_clustering.h),
// sets each episode's patch (episode_patch_text() of its medoid window) and routes questions.
//
// Patch variants under the same runtime and the same Eq. 3 (paper App. A.2), option `patch`:
//   0 episode: a fixed instruction + the episode's medoid window (set_patch());
//   1 infinipot: a generic "summarize the most important parts" instruction (set_patch());
//   2 snapkv: no extra forward; the block's last `window` tokens are the probe rows (also what
//     any variant does when no patch was set: `chat` and `generate` build no episodes yet).
//
// Selection (option `per_head`): 0 keeps one list per layer ranked by the max over its KV heads;
// 1 (default) ranks per KV head, every head keeping the same number of tokens; 2 is the paper's
// head-wise non-uniform selection (Ada-KV): each layer keeps its top M_l·H_kv (head, token)
// pairs jointly, so heads keep different numbers (a ragged KeepPlan, core/kv/working_set.h).
// Layer budgets (§3.2, set_layer_budgets() or option `layers=a,b,...`): M_l tokens per KV head
// in layer l when the runner shrinks to the budget (scaled by target/budget for other targets),
// at most the target per head, so the working set holds n <= budget slots per (layer, head):
// budget >= max M_l gives every layer its M_l (core/policies/layer_budget.h computes them).
// Heads can differ only where M_l is below the budget (a head keeps at most the budget): with
// no layer budgets per_head=2 keeps per_head=1's plan. The budget is then the allocation (the
// slots every layer holds), M_l·H_kv the (head, token) pairs attention sees in layer l.
//
// Engram's deviations: kept tokens are compacted to positions 0..n-1 like every Engram plan (the
// paper decodes at the original total length); the slot count is shared by all layers (the
// allocation is max M_l per layer, the layers below it leave slots empty); the last `tail`
// tokens (32) of a block are always kept by every head, so a question block that passes the
// budget cannot evict the question itself; when decode reaches the budget the last scores
// decide (tokens no patch scored rank by recency, above every scored one).
#pragma once

#include <string>
#include <vector>

#include "core/policies/layer_budget.h"
#include "core/policies/memory_policy.h"

namespace engram {

enum class PatchKind : int64_t { kEpisode = 0, kInfiniPot = 1, kSnapKv = 2 };

struct EpiCacheOptions {
  int64_t episodes = 4;  // E (read by the caller that clusters)
  int64_t w_embed = 4;   // utterances per embedding window (read by the caller)
  PatchKind patch = PatchKind::kEpisode;
  int64_t window = 64;   // probe rows of the snapkv variant
  int64_t tail = 32;     // the last tokens always kept (the snapkv variant: at least its window)
  int64_t per_head = 1;  // 0 per layer, 1 per KV head (uniform), 2 joint over the layer's heads
  bool lexical = false;  // embed=1: the caller embeds with LexicalEmbedder, not the model
  bool centre = true;    // the caller centres the embeddings on the conversation's mean window
  // Chat-time episodes (core/policies/episode_router.h, read by ChatSession):
  int64_t tau_percent = 0;     // a new episode when the best cosine < tau_percent / 100
  int64_t max_episodes = 8;    // no new episode beyond this many
  int64_t rebuild_tokens = 0;  // re-cluster + rebuild an episode fed more; 0 = budget + block
  // calibrated=1: the session sets layer budgets from the model's stored calibration
  // (apply_layer_calibration(); `engram-cli calibrate`), keeping L·budget tokens in all.
  bool calibrated = false;
};

class EpiCachePolicy : public MemoryPolicy {
 public:
  explicit EpiCachePolicy(EpiCacheOptions options = {}) : options_(options) {}
  std::string name() const override { return "epicache"; }
  std::string spec() const override;
  std::unique_ptr<MemoryPolicy> clone() const override {
    return std::make_unique<EpiCachePolicy>(*this);
  }
  const EpiCacheOptions& options() const { return options_; }

  // M_l per layer (tokens per KV head at the budget); empty = every layer gets the budget.
  void set_layer_budgets(std::vector<int64_t> budgets) { layer_budgets_ = std::move(budgets); }
  const std::vector<int64_t>& layer_budgets() const { return layer_budgets_; }

  // The patched prompt's token ids (no BOS): episode and infinipot variants.
  void set_patch(std::vector<int64_t> tokens) { patch_ = std::move(tokens); }
  std::vector<int64_t> patch_tokens() const override;
  bool patch_probabilities() const override { return false; }
  // False (ENGRAM_PROBED_WINDOW=1: true, the peer measured by the same build).
  bool probe_probabilities() const override;

  void begin_request(const WorkingSetInfo& ws) override;
  std::vector<int64_t> probe_rows(const BlockInfo& block) const override;
  void on_layer(const LayerView& view) override;
  std::optional<KeepPlan> shrink(const WorkingSetInfo& ws, int64_t target) override;
  // Decoded tokens are appended to the episode cache as the paper's decoding does; a fixed
  // working set is shrunk only when it is full (M + block, the prefill's bound). Every plan is a
  // gather and re-rotation of all kept slots, and without a fresh patch decode adds no scores:
  // shrinking every 16 tokens cost ~250 ms a plan on an 8B shape (15 ms per decoded token).
  std::optional<KeepPlan> before_decode_step(const WorkingSetInfo& ws) override;

  // Eq. 3 scores of one layer's last scoring, [kv_heads, scored slots] f32, on the device
  // attention ran on.
  const at::Tensor& layer_scores(int64_t layer) const { return scores_.at(layer); }
  // Every layer's scores (an episode's state between requests: a shrink without a fresh patch
  // ranks by them), for the conversation store; set_scores puts stored ones back.
  const std::vector<at::Tensor>& scores() const { return scores_; }
  void set_scores(std::vector<at::Tensor> scores) { scores_ = std::move(scores); }

  // Patch texts in the conversation world's format (the model's QA format: a question line and
  // "Answer:"), for the caller to tokenize. `window_text` is the medoid window's utterance lines.
  static std::string episode_patch_text(const std::string& window_text);
  static std::string infinipot_patch_text();

 private:
  // The snapkv variant, and any policy whose caller set no patch (chat and generate have no
  // episodes yet): the block's last `window` tokens are the probe rows.
  bool uses_window() const { return options_.patch == PatchKind::kSnapKv || patch_.empty(); }
  // The snapkv window's first row in a block of `fresh_tokens` (its last `window` rows).
  int64_t first_window_row(int64_t fresh_tokens) const;
  at::Tensor scores_for(int64_t layer, int64_t kv_heads, int64_t tokens) const;
  // Every layer's scores_for() as one [L, H, T] tensor; undefined when the layers' scores differ
  // in presence, size or device (then per layer).
  at::Tensor all_layer_scores(int64_t layers, int64_t kv_heads, int64_t tokens) const;
  // Tokens per KV head that layer `layer` keeps when shrinking to `target`.
  int64_t layer_keep(int64_t layer, int64_t layers, int64_t target) const;

  EpiCacheOptions options_;
  std::vector<int64_t> patch_;
  std::vector<int64_t> layer_budgets_;
  std::vector<at::Tensor> scores_;  // per layer [kv_heads, scored slots]; -inf on empty slots
};

// Option calibrated=1 (§3.2): layer budgets M_l from the model's measured sensitivity
// (allocate_layer_budgets with the calibration's α), L·budget tokens in all, no layer above
// `most_slots`; the policy's budget becomes max M_l, the slots a rectangular working set needs
// per layer. Returns a note for the person (the budgets, or that the model is not calibrated);
// empty when the option is off.
std::string apply_layer_calibration(EpiCachePolicy& policy,
                                    const std::optional<LayerCalibration>& calibration,
                                    int64_t most_slots);

// Eq. 3 from one layer's probabilities: probs [1, Hq, R, T] of R probe rows over T keys, the
// first `cached` of which are scored. `renormalise`: softmax over the cached keys only.
// Returns [Hkv, cached] = max over rows and the group's query heads.
at::Tensor patch_scores(const at::Tensor& probs, int64_t kv_heads, int64_t cached,
                        bool renormalise);

}  // namespace engram
