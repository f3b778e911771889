// A memory policy that decodes through retrieval: `louiskv` and `pageretrieval` alone (the
// working set keeps every token, as FullCache), or after a prefill policy, `PREFILL+louiskv`
// (e.g. `snapkv+louiskv`, `streaming+pageretrieval`): the prefill policy decides what stays in the
// working set, exactly as alone, and decoding retrieves from that working set (issue 17: "a decode
// policy composes with any prefill policy").
#pragma once

#include <memory>

#include "core/policies/memory_policy.h"
#include "core/policies/retrieval_policy.h"

namespace engram {

class RetrievingPolicy : public MemoryPolicy {
 public:
  RetrievingPolicy(std::unique_ptr<MemoryPolicy> prefill, std::unique_ptr<RetrievalPolicy> decode);
  RetrievingPolicy(const RetrievingPolicy& other);

  std::string name() const override;
  std::string spec() const override;
  std::unique_ptr<MemoryPolicy> clone() const override {
    return std::make_unique<RetrievingPolicy>(*this);
  }
  void begin_request(const WorkingSetInfo& ws) override;
  std::vector<int64_t> probe_rows(const BlockInfo& block) const override;
  bool wants_layers(ForwardPhase phase) const override;
  void on_layer(const LayerView& view) override;
  std::vector<int64_t> patch_tokens() const override;
  bool patch_probabilities() const override { return prefill_->patch_probabilities(); }
  bool probe_probabilities() const override { return prefill_->probe_probabilities(); }
  std::optional<KeepPlan> shrink(const WorkingSetInfo& ws, int64_t target) override;
  std::optional<KeepPlan> before_decode_step(const WorkingSetInfo& ws) override;
  void end_request(const WorkingSetInfo& ws) override;
  bool keeps_every_token() const override { return prefill_->keeps_every_token(); }
  RetrievalPolicy* decode_retrieval() override { return decode_.get(); }

  MemoryPolicy& prefill_policy() { return *prefill_; }

 private:
  void sync_budget() const { prefill_->set_budget(budget()); }

  std::unique_ptr<MemoryPolicy> prefill_;
  std::unique_ptr<RetrievalPolicy> decode_;
};

}  // namespace engram
