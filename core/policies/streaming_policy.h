// `streaming`: StreamingLLM (Xiao et al., 2023, arXiv:2309.17453): the first `sink_tokens`
// tokens (attention sinks) and the most recent ones stay; everything between leaves attention.
// As in the paper, positions are those within the cache: kept tokens are re-rotated to
// 0..n-1 after each eviction. Engram's deviation: decode frees decode_slack() slots at once
// instead of one per token, so the re-rotation is paid once per page, not per token.
#pragma once

#include "core/policies/memory_policy.h"

namespace engram {

class StreamingPolicy : public MemoryPolicy {
 public:
  explicit StreamingPolicy(int64_t sink_tokens = 4) : sinks_(sink_tokens) {}
  std::string name() const override { return "streaming"; }
  std::unique_ptr<MemoryPolicy> clone() const override {
    return std::make_unique<StreamingPolicy>(*this);
  }
  std::string spec() const override;
  int64_t sink_tokens() const { return sinks_; }
  std::optional<KeepPlan> shrink(const WorkingSetInfo& ws, int64_t target) override;

 private:
  int64_t sinks_;
};

}  // namespace engram
