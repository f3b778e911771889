// The text a model planner reads: memory segments, the instruction and the actions so far; the
// model answers with the next action. Contract for training and inference: the model sees
// `text` and continues with " " + target + "\n" (stop at the newline).
//
//   example stack_and_place: put a pencil in a mug and ... => find pencil_1; ...
//   example locked: put a watch on a bed. => find drawer_3; open drawer_3; ...
//   rooms: kitchen visited, living_room unvisited, ...
//   task 1 done: put a pen on a desk.
//   agent: in kitchen | at fridge_1 | holding nothing
//   fridge_1: kitchen | open
//   apple_1: in fridge_1 | cold
//   task: cool a apple and put it on a dining table.
//   history: find fridge_1; open fridge_1
//   next:
//
// Only the example for the task's type and the key example are shown (all are in memory);
// everything else the agent has seen is. `parts` keeps each memory segment's span so a KV
// policy can map segments to tokens; the query (task, history, "next:") is the last part.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env/embodied_memory.h"
#include "core/env/household_task.h"

namespace engram::env {

struct EmbodiedPromptOptions {
  int max_history = 8;  // most recent actions of the current task
};

struct PromptPart {
  std::string key;   // the memory segment's key, or "query"
  std::string kind;  // the segment's kind, or "query"
  std::string text;  // ends with '\n' except the query's "next:"
  int64_t version = 0;
};

struct EmbodiedPrompt {
  std::vector<PromptPart> parts;
  std::string text;  // the parts concatenated
};

EmbodiedPrompt build_embodied_prompt(const std::vector<MemorySegment>& memory, const Task& task,
                                     const std::vector<std::string>& actions,
                                     const EmbodiedPromptOptions& options = {});

}  // namespace engram::env
