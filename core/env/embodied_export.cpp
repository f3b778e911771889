#include "core/env/embodied_export.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/env/expert_planner.h"
#include "core/env/household_session.h"

namespace engram::env {

EmbodiedExportStats export_embodied(const EmbodiedExportOptions& options, std::ostream& out) {
  EmbodiedExportStats stats;
  double total_chars = 0;
  for (int i = 0; i < options.sessions; ++i) {
    const uint64_t seed = options.first_seed + static_cast<uint64_t>(i);
    HouseholdSession session({seed, options.tasks_per_session, options.max_steps_per_task});
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
      session.step(*action);
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
