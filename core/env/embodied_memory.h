// The agent's memory as KEEP manages it (KEEP §4.1): a list of segments, each with a stable key
// and a version that bumps exactly when its text changes. Object segments change often; the
// room list rarely; finished tasks and few-shot examples never.
//
// Kinds and texts (one line each; only what the agent has seen):
//   example  example_heat_and_place: "example heat_and_place: heat a potato ... => find ...; ..."
//   layout   rooms:   "rooms: kitchen visited, living_room visited, bedroom unvisited, ..."
//   history  task_1:  "task 1 done: put a pen on a desk."
//   agent    agent:   "agent: in kitchen | at fridge_1 | holding apple_1"
//   object   apple_1: "apple_1: in fridge_1 | cold"        drawer_2: "drawer_2: bedroom | closed |
//   unsearched"
//            key_1:   "key_1: in drawer_2 | opens door_1" safe_1: "safe_1: study | locked |
//            unsearched"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env/household_world.h"

namespace engram::env {

struct MemorySegment {
  std::string key;
  std::string kind;  // example | layout | history | agent | object
  std::string text;
  int64_t version = 0;  // 1 when first written
  int64_t last_changed_step = 0;
};

struct MemoryRecord {
  std::string key;
  std::string kind;
  std::string text;
};

// Keeps segments grouped by kind (example, layout, history, agent, object), first-written order
// within a kind, and versions them. A key absent from a later update keeps its last text: the agent
// does not forget what it saw.
class EmbodiedMemory {
 public:
  void update(const std::vector<MemoryRecord>& records, int64_t step);
  const std::vector<MemorySegment>& segments() const { return segments_; }
  const MemorySegment* find(const std::string& key) const;

 private:
  std::vector<MemorySegment> segments_;
};

// The current records: examples, layout, finished tasks (texts given), agent, known objects.
std::vector<MemoryRecord> memory_records(const World& world,
                                         const std::vector<std::string>& finished_tasks);
// One known thing's record text ("apple_1: in fridge_1 | cold").
std::string describe_thing(const World& world, const Thing& thing);
// The fixed few-shot example plans, one per task type plus one that fetches a key.
const std::vector<MemoryRecord>& example_records();

}  // namespace engram::env
