#include "core/policies/recompute_ratio_schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace engram {

double RecomputeRatioSchedule::ratio(int64_t layer, int64_t layers) const {
  if (layer <= 0) return 1.0;
  switch (kind) {
    case Kind::kConstant:
      return std::clamp(mean, 0.0, 1.0);
    case Kind::kKeepCode:
      return std::pow(decay, static_cast<double>(layer));
    case Kind::kDecreasing: {
      const int64_t later = std::max<int64_t>(1, layers - 1);
      double sum = 0;  // sum of decay^(i-1), i = 1..later
      for (int64_t i = 0; i < later; ++i)
        sum += std::pow(decay, static_cast<double>(i));
      const double c = mean * static_cast<double>(later) / sum;
      return std::min(1.0, c * std::pow(decay, static_cast<double>(layer - 1)));
    }
  }
  return 1.0;
}

int64_t RecomputeRatioSchedule::units_at(int64_t layer, int64_t layers, int64_t n) const {
  if (n <= 0) return 0;
  if (layer <= 0) return n;
  int64_t k = 0;
  if (kind == Kind::kKeepCode) {
    k = static_cast<int64_t>(std::floor(static_cast<double>(n + 1) * ratio(layer, layers)));
  } else {
    k = std::llround(ratio(layer, layers) * static_cast<double>(n));
  }
  return std::clamp<int64_t>(k, 1, n);
}

std::string RecomputeRatioSchedule::describe() const {
  std::ostringstream s;
  switch (kind) {
    case Kind::kDecreasing:
      s << "decreasing(mean=" << mean << ",decay=" << decay << ")";
      break;
    case Kind::kConstant:
      s << "constant(" << mean << ")";
      break;
    case Kind::kKeepCode:
      s << "keep-code(d=" << decay << ")";
      break;
  }
  return s.str();
}

}  // namespace engram
