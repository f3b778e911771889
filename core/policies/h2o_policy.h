// `h2o`: Heavy-Hitter Oracle (Zhang et al., 2023), the KV-dropping baseline of the LouisKV paper.
// Every cached key accumulates the attention it receives from every query row (prefill rows and
// each decoded token), summed over the query heads of its KV head. At the budget each (layer, KV
// head) keeps its most recent `recent`% slots and the heaviest-hitting rest; what it drops is gone
// for attention (the store still has it).
//
// Engram's deviations: kept keys are compacted to positions 0..n-1 like every Engram plan (the
// paper keeps positions); decode probes one row per layer, so decode takes the per-layer path.
#pragma once

#include <vector>

#include "core/policies/memory_policy.h"

namespace engram {

class H2oPolicy : public MemoryPolicy {
 public:
  explicit H2oPolicy(int64_t recent_percent = 50) : recent_percent_(recent_percent) {}
  std::string name() const override { return "h2o"; }
  std::string spec() const override;
  std::unique_ptr<MemoryPolicy> clone() const override {
    return std::make_unique<H2oPolicy>(*this);
  }
  void begin_request(const WorkingSetInfo& ws) override;
  std::vector<int64_t> probe_rows(const BlockInfo& block) const override;
  bool wants_layers(ForwardPhase phase) const override { return phase == ForwardPhase::kDecode; }
  void on_layer(const LayerView& view) override;
  std::optional<KeepPlan> shrink(const WorkingSetInfo& ws, int64_t target) override;

  // Accumulated attention per slot of one layer, [kv_heads, slots] f32 (CPU).
  const at::Tensor& layer_scores(int64_t layer) const { return scores_.at(layer); }

 private:
  int64_t recent_percent_;
  std::vector<at::Tensor> scores_;  // per layer [kv_heads, slots] f32 CPU
};

}  // namespace engram
