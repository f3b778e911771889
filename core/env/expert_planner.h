// The expert: the next action toward a task, computed from the world. It is the ground truth
// for training and evaluation, and solves every task type from any reachable state.
//
// It plans from the full state but chooses only among things the agent has seen, and explores
// the unseen in a fixed order (closed receptacles of the current room, unvisited rooms in
// house order, closed receptacles elsewhere, then locked places whose key is known). Why: a
// model imitates it from the memory alone, and an omniscient expert's "open drawer_3" for an
// object nobody has seen could only be learnt as a guess.
#pragma once

#include <optional>

#include "core/env/household_action.h"
#include "core/env/household_task.h"
#include "core/env/household_world.h"

namespace engram::env {

// nullopt when the task is already satisfied, or when nothing reachable can satisfy it.
std::optional<Action> expert_next_action(const World& world, const Task& task);

}  // namespace engram::env
