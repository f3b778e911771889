// Draws the tasks of a multi-task session for a seed. Each task is drawn against the world as
// the expert leaves it after the previous ones, and kept only if it is not already satisfied and
// the expert solves it within the step bound, so every session is solvable and a later task can
// depend on what an earlier one moved. About a third of the draws prefer objects that are all
// behind a lock (the locked study or safe), which makes the agent fetch a key.
#pragma once

#include <cstdint>
#include <vector>

#include "core/env/household_task.h"

namespace engram::env {

struct TaskSamplerOptions {
  int count = 5;
  int max_steps_per_task = 60;
  double prefer_locked = 0.35;
};

std::vector<Task> sample_session_tasks(const World& start, uint64_t seed,
                                       const TaskSamplerOptions& options);
// A thing the agent cannot reach without opening something locked.
bool behind_lock(const World& world, const Thing& thing);

}  // namespace engram::env
