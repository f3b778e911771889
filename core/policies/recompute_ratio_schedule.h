// How many retrieved units KEEP keeps recomputing after each layer (KEEP §4.2: "we recompute all
// memories in the first layer and gradually reduce the recomputation ratio r_i").
//
// kDecreasing (the default, the version): r_i = c·decay^(i-1) for layers i = 1..L-1,
//   with c chosen so that the mean of r_1..r_{L-1} is `mean` (0.15, the average ratio the paper
//   and CacheBlend report), capped at 1; k_i = max(1, round(r_i·n)) of the n retrieved units.
// kConstant: r_i = mean for every layer after the first (mean 1.0 recomputes everything).
// kKeepCode: the authors' code, k_{i} = max(1, floor((n+1)·decay^i)) with decay 0.95; the prefix
//   counts in n+1 but is never picked, so at most n. Far more recomputation than 15 %.
#pragma once

#include <cstdint>
#include <string>

namespace engram {

struct RecomputeRatioSchedule {
  enum class Kind { kDecreasing, kConstant, kKeepCode };
  Kind kind = Kind::kDecreasing;
  double mean = 0.15;
  double decay = 0.9;

  // Ratio of layer `layer` (>= 1) of a model with `layers` layers; layer 0 is 1.
  double ratio(int64_t layer, int64_t layers) const;
  // Units to recompute at `layer` (>= 1) out of `retrieved_units` (never 0 when there are any).
  int64_t units_at(int64_t layer, int64_t layers, int64_t retrieved_units) const;
  std::string describe() const;
};

}  // namespace engram
