#include "core/policies/keep_plan_index.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <vector>

namespace engram {

PlanIndex per_head_plan_index(const KeepPlan& plan, int64_t layers, int64_t kv_heads, bool pinned) {
  if (static_cast<int64_t>(plan.per_head.size()) != layers)
    throw std::invalid_argument("KeepPlan: one list per layer expected");
  for (const auto& layer : plan.per_head) {
    if (static_cast<int64_t>(layer.size()) != kv_heads)
      throw std::invalid_argument("KeepPlan: one list per KV head expected");
  }
  const int64_t n = plan.kept();
  PlanIndex out;
  // Written straight into the tensors (2M entries for an 8B shape at an 8K budget), the lists
  // spread over the intra-op threads: a shrink's device waits for this host work.
  out.index = at::empty({layers, kv_heads, n}, at::TensorOptions(at::kLong).pinned_memory(pinned));
  out.padding = at::zeros({layers, kv_heads, n}, at::kBool);
  int64_t* const slots = out.index.data_ptr<int64_t>();
  bool* const pads = out.padding.data_ptr<bool>();
  const int64_t rows = layers * kv_heads;
  std::vector<int64_t> lowest(static_cast<size_t>(rows), std::numeric_limits<int64_t>::max());
  std::vector<int64_t> highest(static_cast<size_t>(rows), -1);
  std::vector<char> short_list(static_cast<size_t>(rows), 0);
  at::parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const auto& head =
          plan.per_head[static_cast<size_t>(r / kv_heads)][static_cast<size_t>(r % kv_heads)];
      const int64_t missing = n - static_cast<int64_t>(head.size());
      int64_t* slot = slots + r * n;
      std::fill(slot, slot + missing, 0);
      std::fill(pads + r * n, pads + r * n + missing, true);
      std::copy(head.begin(), head.end(), slot + missing);
      if (!head.empty()) {
        const auto [lo, hi] = std::minmax_element(head.begin(), head.end());
        lowest[static_cast<size_t>(r)] = *lo;
        highest[static_cast<size_t>(r)] = *hi;
      }
      short_list[static_cast<size_t>(r)] = missing > 0;
    }
  });
  out.lowest = rows > 0 ? *std::min_element(lowest.begin(), lowest.end()) : 0;
  out.highest = rows > 0 ? *std::max_element(highest.begin(), highest.end()) : -1;
  out.ragged = std::find(short_list.begin(), short_list.end(), 1) != short_list.end();
  if (out.highest < 0) out.lowest = 0;
  return out;
}

}  // namespace engram
