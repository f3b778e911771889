// Selective recomputation over an assembled prompt (issue 16; KEEP §4.2, CacheBlend): which rows
// of [prefix | retrieved units | query] are recomputed at each layer, the rest using the units'
// cached KV re-rotated to their assembled positions. A policy decides on host values only (row
// lists, unit-level attention, per-row key deviation); the runner
// (core/engine/selective_recompute.h) measures what the policy asks for and applies its choice.
//
// Contract, checked by the runner: the query rows are recomputed at every layer, and the rows of
// layer i+1 are a subset of those of layer i. A row dropped has no hidden state past that layer,
// so it can never be recomputed later (KEEP §4.3's observation, which the layer-balanced loader
// relies on).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/policies/assembled_layout.h"

namespace engram {

// Attention between units at one layer, averaged over query heads: the mass a row gives to a
// unit is the sum of its probabilities over the unit's tokens; a group of rows gives the mean of
// its rows. Only units recomputed at the layer have rows (a dropped unit has no queries).
struct UnitAttention {
  std::vector<int64_t> units;                  // candidate units (layout indices), ascending
  std::vector<double> from_query;              // [n] query rows -> unit
  std::vector<std::vector<double>> from_unit;  // [n][n] rows of units[a] -> units[b]
};

// What the runner measured at one layer, for the policy's choice of the next layer's rows.
struct LayerEvidence {
  int64_t layer = 0;
  std::vector<int64_t> rows;          // recomputed at this layer, ascending
  UnitAttention unit_attention;       // when asked (RecomputeNeeds::unit_attention)
  std::vector<double> key_deviation;  // per row of `rows`: sum over heads and dims of
                                      // (fresh K - cached K)^2, post-RoPE; 0 for query rows
};

struct RecomputeNeeds {
  bool unit_attention = false;
  bool key_deviation = false;
  // With unit_attention: measure it from each recomputed unit's last `probe_rows` rows and every
  // query row (0: from every recomputed row). The authors' code uses 3; fewer rows make the
  // probabilities, an O(rows x prompt) pass per layer, cheap on long prompts.
  int64_t probe_rows = 0;
};

// One round of importance propagation, for the trace and the panel.
struct ImportanceHop {
  std::vector<int64_t> relevant;  // layout unit indices, by score
  std::vector<double> scores;     // per UnitAttention::units entry
};

// What was recomputed, layer by layer: the executed plan.
struct RecomputePlan {
  std::vector<std::vector<int64_t>> rows;        // [layer] -> rows, ascending
  std::vector<std::vector<ImportanceHop>> hops;  // [layer] -> hops that chose layer+1 (KEEP)
  // [layer] -> the unit attention measured there (empty where the policy did not ask): the
  // edges of the importance-propagation panel.
  std::vector<UnitAttention> attention;
  // Share of the unit tokens recomputed, averaged over layers 1..L-1: the r̄ of the ratio
  // schedule (layer 0 recomputes every unit in KEEP and CacheBlend alike; the query is always
  // recomputed and the prefix never needs to be, so neither is counted).
  double mean_recompute_ratio(const AssembledLayout& layout) const;
};

class RecomputePolicy {
 public:
  virtual ~RecomputePolicy() = default;
  virtual std::string name() const = 0;
  virtual std::string spec() const { return name(); }
  // Rows recomputed at layer 0.
  virtual std::vector<int64_t> first_rows(const AssembledLayout& layout, int64_t layers) = 0;
  // What the runner must measure at `layer` (nothing by default: free).
  virtual RecomputeNeeds needs(int64_t /*layer*/) const { return {}; }
  // Rows of layer evidence.layer + 1: a subset of evidence.rows with every query row. `hops` may
  // receive the propagation rounds behind the choice.
  virtual std::vector<int64_t> next_rows(const AssembledLayout& layout, int64_t layers,
                                         const LayerEvidence& evidence,
                                         std::vector<ImportanceHop>* hops) = 0;
};

// `full-recompute`, `prefix-cache`, `full-reuse`, `cacheblend[:ratio=R]`,
// `keep[:mean=R,decay=D,schedule=decreasing|constant|code,iterations=N,score=density|mass]`. Throws
// std::invalid_argument naming the policies or keys it knows.
std::unique_ptr<RecomputePolicy> make_recompute_policy(const std::string& spec);
// The names, in the order the fidelity evaluation reports them.
std::vector<std::string> recompute_policy_names();

}  // namespace engram
