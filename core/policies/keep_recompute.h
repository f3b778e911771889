// KEEP's selective recomputation (KEEP §4.2; issue 16): layer 0 recomputes every retrieved unit
// and the query; after each layer i, importance propagation (importance_propagation.h) over the
// units still recomputed picks the k_{i+1} of them that layer i+1 recomputes, k from the ratio
// schedule (recompute_ratio_schedule.h: by default the decreasing ratio averaging 15 %;
// `schedule=code` gives the authors' code's k = floor((n+1)·0.95^i)). Granularity is the unit,
// as the paper's (contiguous loads of what is not recomputed). The query is always recomputed.
//
// Engram deviates from the authors' code in two places (DESIGN.md "KEEP"): attention is measured
// from every row of the query and of each recomputed unit (the code uses the last 3 rows), and
// rescoring is the mean over the relevant set plus the query (the code adds a
// propagation term to the query's score). Positions are exact: cached KV is rotated to its
// assembled position (the code places recomputed tokens after all cached ones).
#pragma once

#include "core/policies/importance_propagation.h"
#include "core/policies/recompute_policy.h"
#include "core/policies/recompute_ratio_schedule.h"

namespace engram {

struct KeepRecomputeOptions {
  RecomputeRatioSchedule schedule;
  ImportanceOptions importance;
  // true (`score=density`, the default): a unit's score is the average attention between the
  // query's rows and the unit's tokens (KEEP §4.2: "the average attention scores between the
  // query and all memories"), so long units (the few-shot examples) do not win by length alone.
  // false (`score=mass`): the attention summed over the unit's tokens, the Engram default until
  // 2026-11-27; on engram-tiny it recomputes more and plans worse (docs/keep.md, fidelity).
  bool per_token = true;
  // `probe=N`: unit attention from each recomputed unit's last N rows and the query's rows
  // (RecomputeNeeds::probe_rows); 0 (default) measures every recomputed row.
  int64_t probe_rows = 0;
};

class KeepRecompute : public RecomputePolicy {
 public:
  explicit KeepRecompute(KeepRecomputeOptions options = {}) : options_(options) {}
  std::string name() const override { return "keep"; }
  std::string spec() const override;
  std::vector<int64_t> first_rows(const AssembledLayout& layout, int64_t layers) override;
  RecomputeNeeds needs(int64_t layer) const override;
  std::vector<int64_t> next_rows(const AssembledLayout& layout, int64_t layers,
                                 const LayerEvidence& evidence,
                                 std::vector<ImportanceHop>* hops) override;
  const KeepRecomputeOptions& options() const { return options_; }

 private:
  KeepRecomputeOptions options_;
};

}  // namespace engram
