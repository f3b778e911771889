#include "core/policies/recompute_baselines.h"

namespace engram {

std::vector<int64_t> FullRecompute::first_rows(const AssembledLayout& layout, int64_t) {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < layout.total; ++r)
    rows.push_back(r);
  return rows;
}

std::vector<int64_t> PrefixCache::first_rows(const AssembledLayout& layout, int64_t) {
  std::vector<int64_t> rows;
  for (int64_t r = layout.prefix_tokens; r < layout.total; ++r)
    rows.push_back(r);
  return rows;
}

std::vector<int64_t> FullReuse::first_rows(const AssembledLayout& layout, int64_t) {
  return layout.query_rows();
}

}  // namespace engram
