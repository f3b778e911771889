// KEEP's multi-hop importance propagation (§4.2, Figure 6), on unit-level attention (issue 16's
// version; DESIGN.md "KEEP" gives the authors' code's variant):
//   init      score(u) = mean attention of the query rows to unit u;
//   iterate   relevant set S = the `keep` units of highest score; rescore every candidate u by
//             the mean attention it receives from S ∪ {query}, a unit's attention to itself
//             counted as 0 (it says nothing about u's relevance to the others);
//   stop      when S is the same as the round before, or after `max_iterations` rounds (the
//             reference has no cap).
// So "open the door" → door → key → table: the table is found through the key even though the
// query barely attends to it. Ties go to the earlier unit. Tensor-free.
#pragma once

#include <cstdint>
#include <vector>

#include "core/policies/recompute_policy.h"

namespace engram {

struct ImportanceOptions {
  int max_iterations = 8;
};

struct ImportanceResult {
  std::vector<int64_t> selected;    // layout unit indices, ascending
  std::vector<ImportanceHop> hops;  // the initial ranking, then one per rescoring round
  bool converged = false;
};

// Throws std::invalid_argument when the matrix does not match the candidate list.
ImportanceResult propagate_importance(const UnitAttention& attention, int64_t keep,
                                      const ImportanceOptions& options = {});

}  // namespace engram
