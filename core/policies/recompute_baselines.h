// The fixed baselines of issue 16, as recompute policies over the same runner
// (core/engine/selective_recompute.h), so that every method differs only in what it recomputes:
//   FullRecompute  every row at every layer, the prefix too: plain prefill of the prompt;
//   PrefixCache    the shared system prefix reused, every unit and query row recomputed (exact:
//                  the prefix's KV does not depend on what follows it);
//   FullReuse      only the query recomputed; every unit's cached KV used as it is (no
//                  cross-attention between units; KEEP §3 "Full KV Reuse").
#pragma once

#include "core/policies/recompute_policy.h"

namespace engram {

// Rows chosen once at layer 0 and kept unchanged at every layer.
class FixedRecompute : public RecomputePolicy {
 public:
  std::vector<int64_t> next_rows(const AssembledLayout&, int64_t, const LayerEvidence& evidence,
                                 std::vector<ImportanceHop>*) override {
    return evidence.rows;
  }
};

class FullRecompute : public FixedRecompute {
 public:
  std::string name() const override { return "full-recompute"; }
  std::vector<int64_t> first_rows(const AssembledLayout& layout, int64_t layers) override;
};

class PrefixCache : public FixedRecompute {
 public:
  std::string name() const override { return "prefix-cache"; }
  std::vector<int64_t> first_rows(const AssembledLayout& layout, int64_t layers) override;
};

class FullReuse : public FixedRecompute {
 public:
  std::string name() const override { return "full-reuse"; }
  std::vector<int64_t> first_rows(const AssembledLayout& layout, int64_t layers) override;
};

}  // namespace engram
