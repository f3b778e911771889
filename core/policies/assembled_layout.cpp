#include "core/policies/assembled_layout.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace engram {

AssembledLayout assemble_layout(int64_t prefix_tokens, const std::vector<int64_t>& unit_tokens,
                                int64_t query_tokens) {
  if (prefix_tokens < 0) throw std::invalid_argument("assembled prompt: negative prefix length");
  if (query_tokens <= 0) throw std::invalid_argument("assembled prompt: the query has no tokens");
  AssembledLayout layout;
  layout.prefix_tokens = prefix_tokens;
  int64_t row = prefix_tokens;
  for (size_t i = 0; i < unit_tokens.size(); ++i) {
    if (unit_tokens[i] <= 0) {
      throw std::invalid_argument("assembled prompt: unit " + std::to_string(i) + " has no tokens");
    }
    layout.units.push_back({static_cast<int64_t>(i), row, row + unit_tokens[i]});
    row += unit_tokens[i];
  }
  layout.query_begin = row;
  layout.total = row + query_tokens;
  return layout;
}

int64_t AssembledLayout::unit_of_row(int64_t row) const {
  if (row < prefix_tokens || row >= query_begin) return -1;
  auto it = std::upper_bound(units.begin(), units.end(), row,
                             [](int64_t r, const UnitSpan& s) { return r < s.end; });
  return it == units.end() ? -1 : it->unit;
}

std::vector<int64_t> AssembledLayout::query_rows() const {
  std::vector<int64_t> rows;
  for (int64_t r = query_begin; r < total; ++r)
    rows.push_back(r);
  return rows;
}

std::vector<int64_t> AssembledLayout::rows_of_units(const std::vector<int64_t>& chosen) const {
  std::vector<int64_t> rows;
  for (int64_t u : chosen) {
    if (u < 0 || u >= static_cast<int64_t>(units.size()))
      throw std::out_of_range("assembled prompt: no unit " + std::to_string(u));
    for (int64_t r = units[u].begin; r < units[u].end; ++r)
      rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

std::vector<int64_t> AssembledLayout::all_unit_rows() const {
  std::vector<int64_t> rows;
  for (int64_t r = prefix_tokens; r < query_begin; ++r)
    rows.push_back(r);
  return rows;
}

}  // namespace engram
