// One greedy line from a model, the contract of Engram's two worlds (core/env): the model sees
// BOS + encode(prompt) and continues with the answer, ended by EOS or a newline. The embodied
// planner's next action and a conversation answer are both one line.
#pragma once

#include <cstdint>
#include <string>

#include "core/engine/loaded_model.h"
#include "core/policies/memory_policy.h"

namespace engram {

struct LineCompletion {
  std::string text;  // without the newline and surrounding blanks
  double time_to_first_token_ms = 0;
  int64_t prompt_tokens = 0;
  int64_t peak_kv_tokens = 0;
};

// Throws ModelError when the model has no tokenizer. With a policy (and its budget set) the
// prompt is prefilled in blocks under it; without one, full KV.
LineCompletion complete_line(const LoadedModel& model, const std::string& prompt,
                             int64_t max_new_tokens, MemoryPolicy* policy = nullptr);

}  // namespace engram
