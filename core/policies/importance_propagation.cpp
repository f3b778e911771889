#include "core/policies/importance_propagation.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace engram {
namespace {

// Candidate positions (indices into attention.units) of the `keep` highest scores.
std::vector<size_t> top(const std::vector<double>& scores, int64_t keep) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  order.resize(static_cast<size_t>(std::min<int64_t>(keep, static_cast<int64_t>(order.size()))));
  return order;
}

ImportanceHop hop_of(const UnitAttention& a, const std::vector<size_t>& relevant,
                     const std::vector<double>& scores) {
  ImportanceHop hop;
  for (size_t i : relevant)
    hop.relevant.push_back(a.units[i]);
  hop.scores = scores;
  return hop;
}

}  // namespace

ImportanceResult propagate_importance(const UnitAttention& a, int64_t keep,
                                      const ImportanceOptions& options) {
  const size_t n = a.units.size();
  if (a.from_query.size() != n || a.from_unit.size() != n)
    throw std::invalid_argument("importance propagation: attention does not match the units");
  for (const auto& row : a.from_unit)
    if (row.size() != n)
      throw std::invalid_argument("importance propagation: the unit matrix must be square");
  ImportanceResult result;
  if (n == 0 || keep <= 0) {
    result.converged = true;
    return result;
  }

  std::vector<double> scores = a.from_query;
  std::vector<size_t> relevant = top(scores, keep);
  result.hops.push_back(hop_of(a, relevant, scores));
  for (int round = 0; round < options.max_iterations; ++round) {
    const double sources = static_cast<double>(relevant.size() + 1);  // + the query
    for (size_t u = 0; u < n; ++u) {
      double sum = a.from_query[u];
      for (size_t s : relevant)
        if (s != u) sum += a.from_unit[s][u];
      scores[u] = sum / sources;
    }
    std::vector<size_t> next = top(scores, keep);
    result.hops.push_back(hop_of(a, next, scores));
    std::vector<size_t> before = relevant, after = next;
    std::sort(before.begin(), before.end());
    std::sort(after.begin(), after.end());
    relevant = next;
    if (before == after) {
      result.converged = true;
      break;
    }
  }
  for (size_t i : relevant)
    result.selected.push_back(a.units[i]);
  std::sort(result.selected.begin(), result.selected.end());
  return result;
}

}  // namespace engram
