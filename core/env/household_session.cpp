#include "core/env/household_session.h"

#include "core/env/household_generator.h"

namespace engram::env {

HouseholdSession::HouseholdSession(const SessionOptions& options)
    : options_(options), world_(generate_world(options.seed)) {
  TaskSamplerOptions sampler;
  sampler.count = options.task_count;
  sampler.max_steps_per_task = options.max_steps_per_task;
  tasks_ = sample_session_tasks(world_, options.seed, sampler);
  if (!tasks_.empty()) reached_.assign(subgoal_names(tasks_[0]).size(), false);
  refresh_memory();
}

void HouseholdSession::refresh_memory() {
  memory_.update(memory_records(world_, finished_texts_), step_);
}

void HouseholdSession::end_task(bool success) {
  const Task& task = tasks_[current_];
  if (success) reached_.assign(reached_.size(), true);
  records_.push_back({task, success, task_steps_, reached_});
  finished_texts_.push_back("task " + std::to_string(current_ + 1) +
                            (success ? " done: " : " failed: ") + task.instruction());
  ++current_;
  task_steps_ = 0;
  task_actions_.clear();
  if (!finished()) reached_.assign(subgoal_names(tasks_[current_]).size(), false);
  // A planner that took another path may have satisfied a later task on the way.
  if (!finished() && task_satisfied(world_, tasks_[current_])) end_task(true);
}

StepOutcome HouseholdSession::step(const Action& action) {
  StepOutcome out;
  if (finished()) {
    out.result = {false, "the session is over"};
    return out;
  }
  out.result = world_.apply(action);
  ++step_;
  ++task_steps_;
  task_actions_.push_back(out.result.ok
                              ? to_string(action)
                              : to_string(action) + " [failed: " + out.result.message + "]");
  const Task& task = tasks_[current_];
  const std::vector<bool> now = subgoals_holding(world_, task);
  for (size_t i = 0; i < now.size(); ++i)
    reached_[i] = reached_[i] || now[i];
  if (now.back() || task_steps_ >= options_.max_steps_per_task) {
    out.task_ended = true;
    out.task_success = now.back();
    end_task(now.back());
  }
  refresh_memory();
  return out;
}

void HouseholdSession::abandon_task() {
  if (finished()) return;
  end_task(false);
  refresh_memory();
}

}  // namespace engram::env
