#include "core/policies/keep_recompute.h"

#include <algorithm>
#include <sstream>

namespace engram {

std::string KeepRecompute::spec() const {
  std::ostringstream s;
  const RecomputeRatioSchedule& r = options_.schedule;
  s << "keep:schedule="
    << (r.kind == RecomputeRatioSchedule::Kind::kDecreasing ? "decreasing"
        : r.kind == RecomputeRatioSchedule::Kind::kConstant ? "constant"
                                                            : "code")
    << ",mean=" << r.mean << ",decay=" << r.decay
    << ",iterations=" << options_.importance.max_iterations
    << ",score=" << (options_.per_token ? "density" : "mass");
  if (options_.probe_rows > 0) s << ",probe=" << options_.probe_rows;
  return s.str();
}

std::vector<int64_t> KeepRecompute::first_rows(const AssembledLayout& layout, int64_t) {
  std::vector<int64_t> rows = layout.all_unit_rows();
  for (int64_t r : layout.query_rows())
    rows.push_back(r);
  return rows;
}

RecomputeNeeds KeepRecompute::needs(int64_t) const {
  RecomputeNeeds n;
  n.unit_attention = true;
  n.probe_rows = options_.probe_rows;
  return n;
}

std::vector<int64_t> KeepRecompute::next_rows(const AssembledLayout& layout, int64_t layers,
                                              const LayerEvidence& evidence,
                                              std::vector<ImportanceHop>* hops) {
  UnitAttention a = evidence.unit_attention;
  if (options_.per_token) {
    for (size_t b = 0; b < a.units.size(); ++b) {
      const auto tokens = static_cast<double>(layout.units[a.units[b]].tokens());
      a.from_query[b] /= tokens;
      for (auto& row : a.from_unit)
        row[b] /= tokens;
    }
  }
  const int64_t retrieved = static_cast<int64_t>(layout.units.size());
  // The set never grows: at most the units still recomputed.
  const int64_t keep =
      std::min<int64_t>(options_.schedule.units_at(evidence.layer + 1, layers, retrieved),
                        static_cast<int64_t>(a.units.size()));
  ImportanceResult chosen = propagate_importance(a, keep, options_.importance);
  if (hops) *hops = std::move(chosen.hops);
  std::vector<int64_t> rows = layout.rows_of_units(chosen.selected);
  for (int64_t r : layout.query_rows())
    rows.push_back(r);
  return rows;
}

}  // namespace engram
