// ALFRED's seven task types over the household, as goals on the world state: a task is done
// when its predicate holds, however the agent got there. Subgoals are the ordered milestones
// used for the subgoal success rate (a milestone counts once reached, even if later undone).
#pragma once

#include <string>
#include <vector>

#include "core/env/household_world.h"

namespace engram::env {

enum class TaskType {
  kPickAndPlace,     // a X in/on a Y
  kPickTwoAndPlace,  // two X in/on a Y
  kCleanAndPlace,    // a clean X in/on a Y
  kHeatAndPlace,     // a hot X in/on a Y
  kCoolAndPlace,     // a cold X in/on a Y
  kExamineInLight,   // holding a X, standing at a lit lamp of type `receptacle`
  kStackAndPlace,    // a X in a `container`, that container in/on a Y
};
constexpr int kTaskTypeCount = 7;
const char* task_type_name(TaskType type);  // "pick_and_place", ...

struct Task {
  TaskType type = TaskType::kPickAndPlace;
  std::string object;      // a type name: any instance will do, as in ALFRED
  std::string container;   // kStackAndPlace only
  std::string receptacle;  // the destination type, or the lamp type for kExamineInLight
  // Every instance of `object` was behind a lock when the task was set: solving it needs a key
  // whose whereabouts the agent must remember or find.
  bool needs_key = false;

  std::string instruction() const;  // "heat a potato and put it on a countertop."
  bool operator==(const Task&) const = default;
};

bool task_satisfied(const World& world, const Task& task);
std::vector<std::string> subgoal_names(const Task& task);
// Which milestones hold in this state (the last one is the goal itself).
std::vector<bool> subgoals_holding(const World& world, const Task& task);

}  // namespace engram::env
