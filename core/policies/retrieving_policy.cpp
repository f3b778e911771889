#include "core/policies/retrieving_policy.h"

namespace engram {

RetrievingPolicy::RetrievingPolicy(std::unique_ptr<MemoryPolicy> prefill,
                                   std::unique_ptr<RetrievalPolicy> decode)
    : prefill_(std::move(prefill)), decode_(std::move(decode)) {
  set_budget(prefill_->budget());
}

RetrievingPolicy::RetrievingPolicy(const RetrievingPolicy& other)
    : MemoryPolicy(other), prefill_(other.prefill_->clone()), decode_(other.decode_->clone()) {}

std::string RetrievingPolicy::name() const {
  return prefill_->keeps_every_token() ? decode_->name() : prefill_->name() + "+" + decode_->name();
}

std::string RetrievingPolicy::spec() const {
  return prefill_->keeps_every_token() ? decode_->spec() : prefill_->spec() + "+" + decode_->spec();
}

// The prefill policy's budget is this policy's (MemoryPolicy::budget() is not virtual): it is
// copied before every hook that may read it.
void RetrievingPolicy::begin_request(const WorkingSetInfo& ws) {
  sync_budget();
  prefill_->begin_request(ws);
}

std::vector<int64_t> RetrievingPolicy::probe_rows(const BlockInfo& block) const {
  sync_budget();
  return prefill_->probe_rows(block);
}

bool RetrievingPolicy::wants_layers(ForwardPhase phase) const {
  return prefill_->wants_layers(phase);
}

void RetrievingPolicy::on_layer(const LayerView& view) {
  prefill_->on_layer(view);
}

std::vector<int64_t> RetrievingPolicy::patch_tokens() const {
  sync_budget();
  return prefill_->patch_tokens();
}

std::optional<KeepPlan> RetrievingPolicy::shrink(const WorkingSetInfo& ws, int64_t target) {
  sync_budget();
  return prefill_->shrink(ws, target);
}

std::optional<KeepPlan> RetrievingPolicy::before_decode_step(const WorkingSetInfo& ws) {
  sync_budget();
  return prefill_->before_decode_step(ws);
}

void RetrievingPolicy::end_request(const WorkingSetInfo& ws) {
  prefill_->end_request(ws);
}

}  // namespace engram
