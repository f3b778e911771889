#include "core/policies/memory_policy.h"

#include <algorithm>

namespace engram {

int64_t MemoryPolicy::decode_slack() const {
  // A page of 16 slots, and never more than an eighth of the budget.
  return std::clamp<int64_t>(budget_ / 8, 1, 16);
}

std::optional<KeepPlan> MemoryPolicy::before_decode_step(const WorkingSetInfo& ws) {
  if (budget_ <= 0 || ws.tokens + 1 <= budget_) return std::nullopt;
  return shrink(ws, budget_ - decode_slack());
}

}  // namespace engram
