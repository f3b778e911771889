// `snapkv`: SnapKV (Li et al., 2024, arXiv:2404.14469). When a prefill block pushes the working
// set past its budget, the block's last `window` tokens (the observation window) score every
// cached key per KV head: the softmax attention they give it, averaged over the window's rows
// and the query heads of the group, then max-pooled over neighbouring keys (kernel 7). Each
// (layer, KV head) keeps its top-scored keys plus the window itself.
//
// Engram's deviations: kept keys are compacted to positions 0..n-1 like every Engram plan (the
// paper keeps their positions); decode has no probes (the CUDA graph serves it), so when a reply
// reaches the budget the last scores decide, and tokens scored by no window rank by recency,
// above every scored one.
#pragma once

#include <vector>

#include "core/policies/memory_policy.h"

namespace engram {

class SnapKvPolicy : public MemoryPolicy {
 public:
  explicit SnapKvPolicy(int64_t window = 64, int64_t pool_kernel = 7)
      : window_(window), kernel_(pool_kernel) {}
  std::string name() const override { return "snapkv"; }
  std::unique_ptr<MemoryPolicy> clone() const override {
    return std::make_unique<SnapKvPolicy>(*this);
  }
  std::string spec() const override;
  void begin_request(const WorkingSetInfo& ws) override;
  std::vector<int64_t> probe_rows(const BlockInfo& block) const override;
  void on_layer(const LayerView& view) override;
  std::optional<KeepPlan> shrink(const WorkingSetInfo& ws, int64_t target) override;

  // Pooled scores per slot of one layer's last scoring, [kv_heads, slots] f32 (CPU).
  const at::Tensor& layer_scores(int64_t layer) const { return scores_.at(layer); }

 private:
  at::Tensor scores_for(int64_t layer, int64_t kv_heads, int64_t tokens) const;

  int64_t window_;
  int64_t kernel_;
  std::vector<at::Tensor> scores_;  // per layer [kv_heads, scored slots] f32 CPU
  int64_t probed_rows_ = 0;         // rows of the last scoring (the window kept with it)
  bool fresh_ = false;              // scores_ were computed for the block being finished
};

}  // namespace engram
