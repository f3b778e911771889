#include "core/policies/cacheblend_recompute.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

namespace engram {

std::string CacheBlendRecompute::spec() const {
  std::ostringstream s;
  s << "cacheblend:ratio=" << ratio_;
  return s.str();
}

std::vector<int64_t> CacheBlendRecompute::first_rows(const AssembledLayout& layout, int64_t) {
  std::vector<int64_t> rows = layout.all_unit_rows();
  for (int64_t r : layout.query_rows())
    rows.push_back(r);
  return rows;
}

RecomputeNeeds CacheBlendRecompute::needs(int64_t layer) const {
  RecomputeNeeds n;
  n.key_deviation = layer == kCheckLayer;
  return n;
}

std::vector<int64_t> CacheBlendRecompute::next_rows(const AssembledLayout& layout, int64_t,
                                                    const LayerEvidence& evidence,
                                                    std::vector<ImportanceHop>*) {
  if (evidence.layer != kCheckLayer) return evidence.rows;  // before: all; after: the chosen
  std::vector<size_t> unit_rows;                            // positions in evidence.rows
  for (size_t i = 0; i < evidence.rows.size(); ++i)
    if (layout.unit_of_row(evidence.rows[i]) >= 0) unit_rows.push_back(i);
  const auto keep = std::min<size_t>(
      unit_rows.size(),
      static_cast<size_t>(std::ceil(ratio_ * static_cast<double>(layout.unit_tokens()) - 1e-9)));
  std::stable_sort(unit_rows.begin(), unit_rows.end(), [&](size_t a, size_t b) {
    return evidence.key_deviation[a] > evidence.key_deviation[b];
  });
  std::vector<int64_t> rows;
  for (size_t i = 0; i < keep; ++i)
    rows.push_back(evidence.rows[unit_rows[i]]);
  for (int64_t r : layout.query_rows())
    rows.push_back(r);
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace engram
