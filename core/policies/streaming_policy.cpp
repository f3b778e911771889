#include "core/policies/streaming_policy.h"

#include <algorithm>

namespace engram {

std::string StreamingPolicy::spec() const {
  return sinks_ == 4 ? name() : name() + ":sinks=" + std::to_string(sinks_);
}

std::optional<KeepPlan> StreamingPolicy::shrink(const WorkingSetInfo& ws, int64_t target) {
  KeepPlan plan;
  target = std::max<int64_t>(0, std::min(target, ws.tokens));
  const int64_t sinks = std::min(sinks_, target);
  for (int64_t i = 0; i < sinks; ++i)
    plan.shared.push_back(i);
  for (int64_t i = ws.tokens - (target - sinks); i < ws.tokens; ++i)
    plan.shared.push_back(i);
  plan.reason = "streaming: " + std::to_string(sinks) + " sinks + " +
                std::to_string(target - sinks) + " recent";
  return plan;
}

}  // namespace engram
