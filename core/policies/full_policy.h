// `full`: every token stays in attention (the behaviour before policies, bit for bit). A chat
// stops at the model's trained positions; the error says which policies continue past them.
#pragma once

#include "core/policies/memory_policy.h"

namespace engram {

class FullPolicy : public MemoryPolicy {
 public:
  std::string name() const override { return "full"; }
  std::unique_ptr<MemoryPolicy> clone() const override {
    return std::make_unique<FullPolicy>(*this);
  }
  std::optional<KeepPlan> shrink(const WorkingSetInfo& /*ws*/, int64_t /*target*/) override {
    return std::nullopt;
  }
  bool keeps_every_token() const override { return true; }
};

}  // namespace engram
