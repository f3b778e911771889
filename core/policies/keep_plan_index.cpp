#include "core/policies/keep_plan_index.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace engram {

PlanIndex per_head_plan_index(const KeepPlan& plan, int64_t layers, int64_t kv_heads, bool pinned) {
  if (static_cast<int64_t>(plan.per_head.size()) != layers)
    throw std::invalid_argument("KeepPlan: one list per layer expected");
  const int64_t n = plan.kept();
  PlanIndex out;
  // Written straight into the tensors (2M entries for an 8B shape at an 8K budget).
  out.index = at::empty({layers, kv_heads, n}, at::TensorOptions(at::kLong).pinned_memory(pinned));
  out.padding = at::zeros({layers, kv_heads, n}, at::kBool);
  int64_t* slot = out.index.data_ptr<int64_t>();
  bool* pad = out.padding.data_ptr<bool>();
  out.lowest = std::numeric_limits<int64_t>::max();
  for (const auto& layer : plan.per_head) {
    if (static_cast<int64_t>(layer.size()) != kv_heads)
      throw std::invalid_argument("KeepPlan: one list per KV head expected");
    for (const auto& head : layer) {
      const int64_t missing = n - static_cast<int64_t>(head.size());
      out.ragged = out.ragged || missing > 0;
      std::fill(slot, slot + missing, 0);
      std::fill(pad, pad + missing, true);
      std::copy(head.begin(), head.end(), slot + missing);
      for (const int64_t s : head) {
        out.lowest = std::min(out.lowest, s);
        out.highest = std::max(out.highest, s);
      }
      slot += n;
      pad += n;
    }
  }
  if (out.highest < 0) out.lowest = 0;
  return out;
}

}  // namespace engram
