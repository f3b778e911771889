// The model as the household simulator's planner (closed loop: model proposes, simulator
// executes, memory updates), shared by engram-cli sim --model and eval embodied. The prompt is
// the one the training export writes (core/env/embodied_prompt.h); the ids are those the trainer
// uses: BOS + encode(prompt), and the model continues with one action line.
#pragma once

#include <string>

#include "app/cli/cli_args.h"
#include "core/engine/loaded_model.h"
#include "core/env/household_action.h"
#include "core/env/household_session.h"
#include "core/policies/memory_policy.h"

namespace engram::cli {

struct PlannerProposal {
  env::Action action;  // what the simulator is given
  std::string text;    // the model's line
  bool parsed = false;
  std::string parse_error;  // when !parsed: action is a placeholder the world refuses
  double time_to_first_token_ms = 0;
  int64_t peak_kv_tokens = 0;
};

// One proposal for the session's current task (the session must not be finished).
// `policy` (may be null: full KV) bounds the prompt's KV.
// The household session of evaluation episode `episode` (seed first_seed + episode), with the
// --tasks (3) and --max-steps (60) flags that eval embodied and eval keep share.
env::SessionOptions episode_session_options(const Args& args, uint64_t first_seed, int64_t episode);

PlannerProposal propose_action(LoadedModel& model, const env::HouseholdSession& session,
                               MemoryPolicy* policy = nullptr);

}  // namespace engram::cli
