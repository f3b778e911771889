#include "core/env/embodied_export.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "core/env/expert_planner.h"
#include "core/env/household_session.h"

namespace engram::env {
namespace {

// A plausible wrong move from what the agent knows: the mistakes a planner model makes are
// walking to the wrong place, entering the wrong room, or opening/closing the wrong thing.
Action random_detour(const World& w, std::mt19937_64& rng) {
  std::vector<Action> options;
  for (const Room& r : w.rooms)
    if (r.name != w.agent.room) options.push_back({Verb::kGoTo, r.name, ""});
  for (const Thing& t : w.things) {
    if (!t.known || t.id == w.agent.holding) continue;
    if (t.room == w.agent.room || w.room_of(t) == w.agent.room)
      options.push_back({Verb::kFind, t.id, ""});
    if (t.parent.empty() && w.info(t).openable && !t.locked && t.room == w.agent.room)
      options.push_back({t.open ? Verb::kClose : Verb::kOpen, t.id, ""});
  }
  if (options.empty()) return {Verb::kGoTo, w.rooms.front().name, ""};
  return options[std::uniform_int_distribution<size_t>(0, options.size() - 1)(rng)];
}

}  // namespace

EmbodiedExportStats export_embodied(const EmbodiedExportOptions& options, std::ostream& out) {
  EmbodiedExportStats stats;
  double total_chars = 0;
  for (int i = 0; i < options.sessions; ++i) {
    const uint64_t seed = options.first_seed + static_cast<uint64_t>(i);
    HouseholdSession session({seed, options.tasks_per_session, options.max_steps_per_task});
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 17);
    std::bernoulli_distribution detour(options.detour_probability);
    std::bernoulli_distribution planner_turn(options.planner_share);
    while (!session.finished()) {
      const Task& task = *session.current_task();
      const std::optional<Action> action = expert_next_action(session.world(), task);
      if (!action) {
        session.abandon_task();
        continue;
      }
      const EmbodiedPrompt prompt =
          build_embodied_prompt(session.memory(), task, session.task_actions(), options.prompt);
      nlohmann::json line = {{"prompt", prompt.text},
                             {"target", to_string(*action)},
                             {"task_type", task_type_name(task.type)},
                             {"seed", seed},
                             {"task_index", session.current_index()},
                             {"step", session.step_count()}};
      out << line.dump() << '\n';
      ++stats.lines;
      total_chars += static_cast<double>(prompt.text.size());
      stats.max_prompt_chars = std::max<int64_t>(stats.max_prompt_chars, prompt.text.size());
      // Drawn only with a planner, so exports without one keep their bytes.
      if (options.planner && planner_turn(rng)) {
        const Action taken = options.planner(session);
        ++stats.planner_steps;
        stats.planner_disagreements += taken == *action ? 0 : 1;
        session.step(taken);
      } else if (options.detour_probability > 0 && detour(rng)) {
        session.step(random_detour(session.world(), rng));
        ++stats.detours;
      } else {
        session.step(*action);
      }
    }
    for (const TaskRecord& r : session.records()) {
      ++stats.tasks;
      stats.tasks_solved += r.success ? 1 : 0;
    }
  }
  stats.mean_prompt_chars = stats.lines ? total_chars / static_cast<double>(stats.lines) : 0;
  return stats;
}

}  // namespace engram::env
