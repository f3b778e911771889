// Training and evaluation data for the embodied world: sessions from consecutive seeds, run by
// the expert in closed loop, one JSON line per step:
//   {"prompt": ..., "target": "pick up apple_1", "task_type": "cool_and_place", "seed": 7,
//    "task_index": 2, "step": 31}
// `step` counts the session's steps (0-based, the step the target is taken at). Seeds are the
// split: train on [0, N) and hold out seeds past it.
//
// With `detour_probability` > 0 the export also teaches recovery (DAgger-style): at such a
// step the line still carries the expert's action for the state, but the session executes a
// random detour (walk to a known thing, enter a room, open or close something) instead, so
// later lines show the expert bringing a drifted state back on course. A model trained only on
// perfect trajectories never sees the states its own mistakes lead to.
//
// With a `planner` (DAgger proper): the planner, a trained model, takes a step with probability
// `planner_share` and the expert the rest; every line still carries the expert's action for the
// state. The lines then cover the states the model's own mistakes lead to, which random detours
// only approximate.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>

#include "core/env/embodied_prompt.h"
#include "core/env/household_action.h"
#include "core/env/household_session.h"

namespace engram::env {

struct EmbodiedExportOptions {
  uint64_t first_seed = 0;
  int sessions = 100;
  int tasks_per_session = 5;
  int max_steps_per_task = 60;
  double detour_probability = 0.0;
  EmbodiedPromptOptions prompt;
  // The action the planner takes in the session's current state (its task is not finished).
  std::function<Action(const HouseholdSession&)> planner;
  double planner_share = 1.0;
};

struct EmbodiedExportStats {
  int64_t lines = 0;
  int64_t tasks = 0;
  int64_t tasks_solved = 0;
  int64_t max_prompt_chars = 0;
  double mean_prompt_chars = 0;
  int64_t detours = 0;
  int64_t planner_steps = 0;
  int64_t planner_disagreements = 0;  // planner steps whose action was not the expert's
};

EmbodiedExportStats export_embodied(const EmbodiedExportOptions& options, std::ostream& out);

}  // namespace engram::env
