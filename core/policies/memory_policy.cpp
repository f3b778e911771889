#include "core/policies/memory_policy.h"

#include <algorithm>

namespace engram {
namespace {

// A right-aligned row of KeepPlan::slots as its list: the entries after the -1 padding.
std::vector<int64_t> listed(const int64_t* row, int64_t n) {
  return {std::find_if(row, row + n, [](int64_t s) { return s >= 0; }), row + n};
}

}  // namespace

std::vector<int64_t> KeepPlan::list(int64_t layer, int64_t head) const {
  if (slots.defined()) {
    const at::Tensor row = slots[layer][head].to(at::kCPU).contiguous();
    return listed(row.data_ptr<int64_t>(), row.numel());
  }
  if (per_head.empty()) return shared;
  return per_head[static_cast<size_t>(layer)][static_cast<size_t>(head)];
}

KeepPlan with_host_lists(KeepPlan plan) {
  if (!plan.slots.defined()) return plan;
  const at::Tensor slots = plan.slots.to(at::kCPU).contiguous();
  plan.slots = at::Tensor();
  const int64_t layers = slots.size(0), heads = slots.size(1), n = slots.size(2);
  const int64_t* row = slots.data_ptr<int64_t>();
  plan.per_head.assign(static_cast<size_t>(layers),
                       std::vector<std::vector<int64_t>>(static_cast<size_t>(heads)));
  for (auto& layer : plan.per_head) {
    for (auto& list : layer) {
      list = listed(row, n);
      row += n;
    }
  }
  return plan;
}

int64_t MemoryPolicy::decode_slack() const {
  // A page of 16 slots, and never more than an eighth of the budget.
  return std::clamp<int64_t>(budget_ / 8, 1, 16);
}

std::optional<KeepPlan> MemoryPolicy::before_decode_step(const WorkingSetInfo& ws) {
  if (budget_ <= 0 || ws.tokens + 1 <= budget_) return std::nullopt;
  return shrink(ws, budget_ - decode_slack());
}

}  // namespace engram
