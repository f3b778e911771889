#include "app/cli/model_planner.h"

#include "core/engine/line_completion.h"
#include "core/env/embodied_prompt.h"

namespace engram::cli {

env::SessionOptions episode_session_options(const Args& args, uint64_t first_seed,
                                            int64_t episode) {
  env::SessionOptions so;
  so.seed = first_seed + static_cast<uint64_t>(episode);
  so.task_count = static_cast<int>(args.integer("tasks", 3));
  so.max_steps_per_task = static_cast<int>(args.integer("max-steps", 60));
  return so;
}

PlannerProposal propose_action(LoadedModel& model, const env::HouseholdSession& session,
                               MemoryPolicy* policy) {
  constexpr int64_t kMaxActionTokens = 24;  // the longest action is ~12 tokens
  const env::EmbodiedPrompt prompt =
      env::build_embodied_prompt(session.memory(), *session.current_task(), session.task_actions());
  const LineCompletion line = complete_line(model, prompt.text, kMaxActionTokens, policy);
  PlannerProposal p;
  p.text = line.text;
  p.time_to_first_token_ms = line.time_to_first_token_ms;
  p.peak_kv_tokens = line.peak_kv_tokens;
  std::optional<env::Action> action = env::parse_action(line.text, &p.parse_error);
  p.parsed = action.has_value();
  // An unparseable proposal still costs a step; the world refuses it and records why.
  p.action = action ? *action : env::Action{env::Verb::kFind, "unparsed(" + line.text + ")", ""};
  return p;
}

}  // namespace engram::cli
