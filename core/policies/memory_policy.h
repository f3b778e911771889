// The one interface every memory system plugs into (issue 14; DESIGN.md "Policies"). A policy
// decides; the runner (core/kv/working_set.h, core/engine/generator.cpp) applies. Decisions are
// tensor-free plans (KeepPlan); the hooks that see tensors get the runtime's own q/k/v and
// attention probabilities, and a policy never runs the model's weights itself.
//
// Lifecycle of one request (generate()):
//   begin_request  once, before anything is computed (plan the working set);
//   per block of fresh tokens (prefill blocks and decode steps):
//     probe_rows       which fresh rows' attention probabilities the policy wants (none: free);
//     on_layer         per layer, only when wants_layers() says so or probe rows were asked;
//     patch_tokens     after a prefill block past the budget: a patch forwarded only to score;
//     after_block      after a prefill block: what stays in the working set;
//   before_decode_step before each decode token: what stays (the working set of the graph step);
//   end_request    once, after the last token.
// Every hook has a default that costs nothing, so `full` is today's behaviour bit for bit.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kv/kv_source.h"

namespace engram {

class RetrievalPolicy;

// The working set as a policy sees it: no tensors.
struct WorkingSetInfo {
  int64_t tokens = 0;         // KV slots per (layer, KV head) (after a ragged plan some are empty)
  int64_t stream_tokens = 0;  // tokens of the request's stream so far (everything ever fed)
  int64_t capacity = 0;       // slots of the working set now
  bool fixed_capacity = false;  // capacity never grows (budget + block, allocated once)
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t max_positions = 0;  // the model's trained positions
};

// One block of fresh tokens about to be computed.
struct BlockInfo {
  ForwardPhase phase = ForwardPhase::kPrefill;
  int64_t step = 0;           // decode step (0 for prefill blocks)
  int64_t fresh_tokens = 0;   // S
  int64_t cached_tokens = 0;  // working-set slots before the block
  bool will_evict = false;    // the block pushes the working set past the budget
};

// Which working-set slots survive, in the order they keep. After the runner applies a plan the
// kept slots are compacted to the front and re-rotated to positions 0..n-1 (positions within
// the working set, as StreamingLLM): the cache stays inside the model's trained positions however
// long the conversation is. per_head lists may differ in length (a ragged plan: head-wise
// selection, layer budgets): the working set then holds n = the longest list slots per (layer,
// head) and hides the unused ones from the shorter lists' heads (core/kv/working_set.h).
//
// A policy that ranks on the device may hand its per-head lists over as one tensor (`slots`)
// instead of host lists: the plan is still a value the runner alone applies, but the lists stay
// where they were ranked (building them and the runner's index on the host, 2M entries each on
// the 8B shape at 8K slots, cost ~10 ms a shrink).
struct KeepPlan {
  std::vector<int64_t> shared;  // one list for every (layer, head), when per_head is empty
  std::vector<std::vector<std::vector<int64_t>>> per_head;  // [layer][kv head][kept slots]
  // Or, with shared and per_head empty: [layers, kv_heads, n] int64 on any device, each (layer,
  // head) list right-aligned after `n - length` padding entries of -1.
  at::Tensor slots;
  std::string reason;  // for the trace and the chat note

  // Slots the working set holds after the plan: the longest list.
  int64_t kept() const {
    if (slots.defined()) return slots.size(2);
    if (per_head.empty()) return static_cast<int64_t>(shared.size());
    size_t most = 0;
    for (const auto& layer : per_head)
      for (const auto& head : layer)
        most = std::max(most, head.size());
    return static_cast<int64_t>(most);
  }
  // One (layer, head)'s list, whichever form the plan has (copied from the device for `slots`).
  std::vector<int64_t> list(int64_t layer, int64_t head) const;
};

// The same plan with host lists (per_head) in place of `slots`: what a policy that ranks on the
// device handed over before (the ENGRAM_HOST_PLAN_LISTS peer, measured by the same build).
KeepPlan with_host_lists(KeepPlan plan);

class MemoryPolicy {
 public:
  virtual ~MemoryPolicy() = default;

  // The registry name ("full", "streaming", ...) and the spec that recreates this policy.
  virtual std::string name() const = 0;
  virtual std::string spec() const { return name(); }
  // A copy with the same settings and state (an evaluation forks a working set per question).
  virtual std::unique_ptr<MemoryPolicy> clone() const = 0;
  // Tokens of KV that attention may see per layer; 0 = unbounded (the policy never evicts).
  int64_t budget() const { return budget_; }
  void set_budget(int64_t tokens) { budget_ = tokens; }

  virtual void begin_request(const WorkingSetInfo& /*ws*/) {}
  virtual std::vector<int64_t> probe_rows(const BlockInfo& /*block*/) const { return {}; }
  // Whether probe rows come with probabilities (LayerView::probs). False: on_layer runs for the
  // block all the same, without them, and the policy scores its probe rows from the queries and
  // keys it sees (EpiCache's snapkv window: cached_attention_max, causal).
  virtual bool probe_probabilities() const { return true; }
  virtual bool wants_layers(ForwardPhase /*phase*/) const { return false; }
  virtual void on_layer(const LayerView& /*view*/) {}
  // Patched-prompt scoring (EpiCache, InfiniPot): tokens the runner forwards after each prefill
  // block that passes the budget, at the positions after it, with every patch row probed (on_layer
  // sees probs [1, Hq, |patch|, T], the last |patch| columns being the patch itself); then it
  // drops the patch's KV (the verbatim tail: truncate is exact) and calls shrink(). The patch
  // never stays in the working set; peak KV per layer <= budget + block + |patch|. Empty: none.
  virtual std::vector<int64_t> patch_tokens() const { return {}; }
  // Whether the patch's rows come with probabilities (LayerView::probs). False: on_layer still
  // runs for the patch, without them, and the policy scores from the queries and keys it sees
  // (EpiCache: cached_attention_max, which never writes the probabilities).
  virtual bool patch_probabilities() const { return true; }
  // Called when the working set holds more than `target` slots (after a prefill block that
  // passed the budget, or because positions ran out): return the slots to keep, at most `target`
  // of them. std::nullopt means the policy cannot shrink the working set (full KV).
  virtual std::optional<KeepPlan> shrink(const WorkingSetInfo& ws, int64_t target) = 0;
  // Before each decode step; the default shrinks to the budget when the next token would pass
  // it, by `decode_slack()` slots at once so that compaction is not paid at every token.
  virtual std::optional<KeepPlan> before_decode_step(const WorkingSetInfo& ws);
  virtual void end_request(const WorkingSetInfo& /*ws*/) {}
  // Slots freed at once when decode reaches the budget.
  int64_t decode_slack() const;
  // True when the policy never evicts (full KV): a KV budget means nothing to it.
  virtual bool keeps_every_token() const { return false; }
  // Decode-time retrieval over the working set (LouisKV, Quest; core/policies/retrieval_policy.h):
  // when set, the runner decodes through core/kv/retrieval_kv_source.h instead of attending to
  // the whole working set. Null for policies that only decide what stays.
  virtual RetrievalPolicy* decode_retrieval() { return nullptr; }

 private:
  int64_t budget_ = 0;
};

}  // namespace engram
