// Memory policies by name: the one factory that the CLI (`--policy`), the app's selector and the
// store (a conversation's policy) go through. A spec is `name` or `name:key=value,...`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/policies/memory_policy.h"

namespace engram {

struct PolicyDescription {
  std::string name;
  std::string summary;  // one line for menus and --help
  bool bounded = true;  // evicts to a budget (false: keeps every token)
};

// Every policy, in menu order.
const std::vector<PolicyDescription>& policy_catalog();
// The policy of a new chat: the best one measured (bench/results): `epicache`.
const char* default_policy_spec();

// Throws std::invalid_argument naming the policies or the keys it knows.
std::unique_ptr<MemoryPolicy> make_policy(const std::string& spec);

// The prefill block of a chat session: 512 tokens on the CPU, 2,048 on a GPU (EpiCache's M_block:
// a shrink costs the same at any block size, and a GPU runs a 2K block about as fast as a 512
// one), a quarter of the positions on small models. The working set of a bounded policy holds
// its budget plus one block.
int64_t session_prefill_block(int64_t max_positions, bool on_gpu = false);

// The budget a bounded policy runs with: `requested` (0 = the default: the model's positions less
// one prefill block), never more than that, so that a block always fits the positions. Full KV
// gets 0 (unbounded); a budget for it is refused. `note` says when the request was lowered.
int64_t effective_budget(const MemoryPolicy& policy, int64_t requested, int64_t max_positions,
                         int64_t block, std::string* note = nullptr);

// A policy with its budget set, ready for a session.
std::unique_ptr<MemoryPolicy> make_policy(const std::string& spec, int64_t requested_budget,
                                          int64_t max_positions, int64_t block,
                                          std::string* note = nullptr);

}  // namespace engram
