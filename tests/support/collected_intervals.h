// An engine observer that keeps every layer interval it is given, and the positions from..from+n:
// what the KV source and page suites check traces and position lists with.
#pragma once

#include <cstdint>
#include <vector>

#include "core/trace/engine_observer.h"
#include "core/trace/layer_interval.h"

namespace engram::test {

struct CollectedIntervals : EngineObserver {
  std::vector<LayerInterval> intervals;
  void on_layer_interval(const LayerInterval& i) override { intervals.push_back(i); }
};

inline std::vector<int64_t> iota(int64_t from, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = from + i;
  return v;
}

}  // namespace engram::test
