// engram-cli eval embodied: the model as the planner of the household simulator, closed loop
// (model proposes, simulator executes, memory updates), on held-out seeds. Prints and writes
// JSON: success rate and subgoal success rate (overall and per task type), time to first token
// per step. Each step is app/cli/model_planner.h's proposal.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "app/cli/model_planner.h"
#include "core/env/expert_planner.h"
#include "core/env/household_session.h"

namespace engram::cli {
namespace {

struct TypeTally {
  int tasks = 0;
  int successes = 0;
  double subgoal_fraction = 0;
};

}  // namespace

int run_eval_embodied(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"episodes", "tasks", "max-steps", "json"});
  with_value.merge(policy_flags());
  const Args args(argc, argv, 3, with_value, {});
  (void)policy_choice_from_args(args, "full");  // a typo fails before the model loads
  const int64_t episodes = args.integer("episodes", 20);
  // Held-out seeds: training exports use seeds from 100000 on (tools/train_engram_tiny.py).
  const auto first_seed = static_cast<uint64_t>(args.integer("seed", 1));
  LoadedModel model = load_text_model_from_args(args, "eval");
  const auto policy = policy_from_args(args, "full", model, 512);
  int64_t peak_kv = 0;

  std::map<std::string, TypeTally> by_type;
  std::vector<double> ttfts;
  int invalid = 0, steps = 0, agreed = 0;
  nlohmann::json task_records = nlohmann::json::array();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t e = 0; e < episodes; ++e) {
    const env::SessionOptions so = episode_session_options(args, first_seed, e);
    env::HouseholdSession session(so);
    while (!session.finished()) {
      // Agreement with the expert in the same state: the per-step skill behind the task rate
      // (a 15-step task needs it near 1).
      const std::optional<env::Action> expert =
          env::expert_next_action(session.world(), *session.current_task());
      const PlannerProposal proposal = propose_action(model, session, policy.get());
      peak_kv = std::max(peak_kv, proposal.peak_kv_tokens);
      ttfts.push_back(proposal.time_to_first_token_ms);
      invalid += proposal.parsed ? 0 : 1;
      agreed += expert && *expert == proposal.action;
      session.step(proposal.action);
      ++steps;
    }
    for (size_t i = 0; i < session.records().size(); ++i) {
      const env::TaskRecord& r = session.records()[i];
      task_records.push_back({{"seed", so.seed},
                              {"task_index", i},
                              {"type", env::task_type_name(r.task.type)},
                              {"success", r.success},
                              {"steps", r.steps}});
      TypeTally& t = by_type[env::task_type_name(r.task.type)];
      ++t.tasks;
      t.successes += r.success ? 1 : 0;
      const auto reached = std::count(r.subgoals_reached.begin(), r.subgoals_reached.end(), true);
      t.subgoal_fraction +=
          r.subgoals_reached.empty() ? 0.0 : double(reached) / double(r.subgoals_reached.size());
    }
    std::fprintf(stderr, "episode %lld/%lld done\n", static_cast<long long>(e + 1),
                 static_cast<long long>(episodes));
  }
  int tasks = 0, successes = 0;
  double subgoals = 0;
  nlohmann::json per_type;
  for (const auto& [name, t] : by_type) {
    tasks += t.tasks;
    successes += t.successes;
    subgoals += t.subgoal_fraction;
    per_type[name] = {{"tasks", t.tasks},
                      {"success_rate", double(t.successes) / t.tasks},
                      {"subgoal_success_rate", t.subgoal_fraction / t.tasks}};
  }
  std::sort(ttfts.begin(), ttfts.end());
  nlohmann::json out;
  out["benchmark"] = "eval-embodied";
  out["model"] = model.name;
  out["policy"] = policy->spec();
  out["kv_budget"] = policy->budget();
  out["peak_kv_tokens"] = peak_kv;
  out["episodes"] = episodes;
  out["first_seed"] = first_seed;
  out["tasks"] = tasks;
  out["steps"] = steps;
  out["invalid_proposals"] = invalid;
  out["expert_agreement"] = steps ? double(agreed) / steps : 0.0;
  out["success_rate"] = tasks ? double(successes) / tasks : 0.0;
  out["subgoal_success_rate"] = tasks ? subgoals / tasks : 0.0;
  out["per_type"] = per_type;
  out["time_to_first_token_ms_median"] = ttfts.empty() ? 0.0 : ttfts[ttfts.size() / 2];
  out["device"] = model.decoder->device().str();
  out["task_records"] = task_records;
  out["wall_seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json summary = out;
  summary.erase("task_records");  // per task: in --json only
  std::printf("%s\n", summary.dump(2).c_str());
  if (args.has("json")) std::ofstream(args.str("json", "")) << out.dump(2) << '\n';
  return 0;
}

}  // namespace engram::cli
