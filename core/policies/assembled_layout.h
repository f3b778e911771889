// Where each token of an assembled prompt comes from (KEEP §4; DESIGN.md "KEEP"): the shared
// system prefix, then the retrieved memory units in prompt order, then the query. Row r of the
// prompt sits at RoPE position r. Tensor-free: recompute policies decide over rows and units of
// this layout, and the runner (core/engine/selective_recompute.h) applies their choice.
#pragma once

#include <cstdint>
#include <vector>

namespace engram {

// Rows [begin, end) of the assembled prompt hold retrieved unit `unit` (its index in the list
// the prompt was assembled from).
struct UnitSpan {
  int64_t unit = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t tokens() const { return end - begin; }
};

struct AssembledLayout {
  int64_t prefix_tokens = 0;    // rows [0, prefix_tokens)
  std::vector<UnitSpan> units;  // in prompt order, back to back after the prefix
  int64_t query_begin = 0;      // rows [query_begin, total) are the query
  int64_t total = 0;

  int64_t unit_tokens() const { return query_begin - prefix_tokens; }
  // The unit holding row r, or -1 for prefix and query rows.
  int64_t unit_of_row(int64_t row) const;
  std::vector<int64_t> query_rows() const;
  // Rows of the given units (indices into `units`), ascending.
  std::vector<int64_t> rows_of_units(const std::vector<int64_t>& units) const;
  std::vector<int64_t> all_unit_rows() const;
};

// Throws std::invalid_argument for an empty query or a unit without tokens.
AssembledLayout assemble_layout(int64_t prefix_tokens, const std::vector<int64_t>& unit_tokens,
                                int64_t query_tokens);

}  // namespace engram
