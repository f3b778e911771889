// The plan of the score-based dropping policies (SnapKV, H2O): per (layer, KV head), the `recent`
// newest slots plus the best-scored of the older ones, `target` in all, in slot order.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <vector>

#include "core/policies/memory_policy.h"

namespace engram {

// `scores(l)` gives layer l's per-slot scores [kv_heads, ws.tokens] f32 on the CPU. On return
// `kept_scores[l]` holds the kept slots' scores in their new order (kept slot j is slot j after
// the plan is applied), so a policy's scores follow their slots.
KeepPlan top_scored_plan(const WorkingSetInfo& ws, int64_t target, int64_t recent,
                         const std::function<at::Tensor(int64_t layer)>& scores,
                         std::vector<at::Tensor>& kept_scores);

}  // namespace engram
