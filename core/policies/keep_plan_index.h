// A per-head KeepPlan as host tensors: each (layer, head) list right-aligned in the plan's n
// slots, after `n - length` padding slots that read slot 0 (a ragged plan's layout,
// KvWorkingSet::apply). Shared by the runner that applies a plan and by policies whose per-slot
// state follows it (EpiCache's scores).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "core/policies/memory_policy.h"

namespace engram {

struct PlanIndex {
  at::Tensor index;     // int64 [layers, kv_heads, n]: the kept slot, 0 on padding
  at::Tensor padding;   // bool [layers, kv_heads, n]: true on padding slots
  bool ragged = false;  // some list is shorter than n
  int64_t lowest = 0;   // smallest and largest slot named (for validation; 0 and -1 when none)
  int64_t highest = -1;
};

// Throws std::invalid_argument when the plan has not `layers` x `kv_heads` lists. `pinned`: the
// index in page-locked memory (a CUDA build's caller copies it to the device without a sync).
PlanIndex per_head_plan_index(const KeepPlan& plan, int64_t layers, int64_t kv_heads,
                              bool pinned = false);

}  // namespace engram
