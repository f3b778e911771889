// Loading the model named on the command line (--model DIR or --shape NAME, --device, --dtype)
// with a progress bar on stderr (bytes and time).
#pragma once

#include <set>
#include <string>

#include "app/cli/cli_args.h"
#include "core/engine/chat_session.h"
#include "core/engine/loaded_model.h"

namespace engram::cli {

// Flags every model-using command accepts.
std::set<std::string> model_flags_with_value();

LoadedModel load_model_from_args(const Args& args, bool allow_shape);

// --policy NAME[:key=value,...] and --kv-budget TOKENS (core/policies/policy_registry.h); the
// policy is checked here, before a model loads, so a typo fails at once.
std::set<std::string> policy_flags();
PolicyChoice policy_choice_from_args(const Args& args, const std::string& fallback);
// The policy ready to run on `model` (budget resolved; a lowered budget is said on stderr).
std::unique_ptr<MemoryPolicy> policy_from_args(const Args& args, const std::string& fallback,
                                               const LoadedModel& model, int64_t block);
// A working set sized for `policy`: budget + one block at fixed addresses, or growing for full KV.
std::unique_ptr<KvWorkingSet> working_set_for(const MemoryPolicy& policy, const LoadedModel& model,
                                              int64_t block);

// A --model folder for a command that works on text (encodes prompts): its tokenizer.model is
// (or tokenizer.json) is required, the error names `command`.
LoadedModel load_text_model_from_args(const Args& args, const std::string& command);
// Benches that run on a checkpoint or on a named shape's random weights with a tokenizer file:
// refuses anything but `--model DIR` or `--shape NAME --tokenizer FILE` (UsageError naming
// `command`), then loads on `device` and says what it loaded.
void require_model_or_shape(const Args& args, const std::string& command);
LoadedModel load_model_or_shape(const Args& args, const std::string& command,
                                const DeviceChoice& device);

}  // namespace engram::cli
