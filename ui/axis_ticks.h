// A tick step for a plot's axis, shared by the layer timeline and the retrieval map.
#pragma once

#include <algorithm>
#include <cmath>

namespace engram::ui {

// A tick step of 1, 2 or 5 × 10^n that gives about `target` ticks over `span`.
inline double tick_step(double span, int target) {
  const double raw = span / std::max(1, target);
  const double p = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-9))));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

}  // namespace engram::ui
