// CacheBlend as a baseline (YaoJiayi/CacheBlend, LMCache's blender; DESIGN.md "CacheBlend"):
// layers 0 and 1 recompute every unit token and the query; at layer 1 the `ratio`·N unit tokens
// whose fresh keys deviate most from their cached keys (sum of squares over KV heads and head
// dims, both post-RoPE at the assembled positions) are chosen, and every later layer recomputes
// only those and the query. Token granularity.
//
// Engram: the "chunks" are the memory units, each computed after the shared system prefix (the
// original computes a chunk after a lone BOS and drops it), the prefix is reused exactly and
// never recomputed, and masking is exact by position.
#pragma once

#include "core/policies/recompute_policy.h"

namespace engram {

class CacheBlendRecompute : public RecomputePolicy {
 public:
  explicit CacheBlendRecompute(double ratio = 0.15) : ratio_(ratio) {}
  std::string name() const override { return "cacheblend"; }
  std::string spec() const override;
  std::vector<int64_t> first_rows(const AssembledLayout& layout, int64_t layers) override;
  RecomputeNeeds needs(int64_t layer) const override;
  std::vector<int64_t> next_rows(const AssembledLayout& layout, int64_t layers,
                                 const LayerEvidence& evidence,
                                 std::vector<ImportanceHop>* hops) override;

 private:
  double ratio_;
  static constexpr int64_t kCheckLayer = 1;  // CacheBlend's: the deviation is read at layer 1
};

}  // namespace engram
