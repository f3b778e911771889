// A multi-task session: one world for a seed, its tasks in order, the agent's memory, and the
// record of each task. The world persists between tasks, so what the agent saw during one task
// is what it can use in the next. A task ends when its goal holds or after its step budget;
// either way the next one starts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env/embodied_memory.h"
#include "core/env/household_task.h"
#include "core/env/household_task_sampler.h"
#include "core/env/household_world.h"

namespace engram::env {

struct SessionOptions {
  uint64_t seed = 0;
  int task_count = 5;
  int max_steps_per_task = 60;
};

struct TaskRecord {
  Task task;
  bool success = false;
  int steps = 0;
  std::vector<bool> subgoals_reached;  // latched: reached at some step of the task
};

struct StepOutcome {
  ActionResult result;
  bool task_ended = false;  // the task that was current before the step ended
  bool task_success = false;
};

class HouseholdSession {
 public:
  explicit HouseholdSession(const SessionOptions& options);

  const World& world() const { return world_; }
  const std::vector<Task>& tasks() const { return tasks_; }
  bool finished() const { return current_ >= tasks_.size(); }
  const Task* current_task() const { return finished() ? nullptr : &tasks_[current_]; }
  size_t current_index() const { return current_; }
  int64_t step_count() const { return step_; }
  // Actions taken in the current task, as "action" or "action [failed: why]".
  const std::vector<std::string>& task_actions() const { return task_actions_; }
  const std::vector<TaskRecord>& records() const { return records_; }
  const std::vector<MemorySegment>& memory() const { return memory_.segments(); }
  const EmbodiedMemory& memory_book() const { return memory_; }

  // Applies the action to the world (a no-op once finished), then the task bookkeeping.
  StepOutcome step(const Action& action);
  // Ends the current task as failed (a planner that cannot go on).
  void abandon_task();

 private:
  void end_task(bool success);
  void refresh_memory();

  SessionOptions options_;
  World world_;
  std::vector<Task> tasks_;
  size_t current_ = 0;
  int64_t step_ = 0;
  int task_steps_ = 0;
  std::vector<bool> reached_;
  std::vector<std::string> task_actions_;
  std::vector<std::string> finished_texts_;
  std::vector<TaskRecord> records_;
  EmbodiedMemory memory_;
};

}  // namespace engram::env
