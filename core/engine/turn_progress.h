// What a chat turn is doing before its first token, for a progress bar: under a memory budget a
// turn may index the conversation's windows (EpiCache's clustering embeds each one) or build an
// episode's cache by block prefill of the whole history, which takes seconds on a GPU and minutes
// on a CPU. Plain types (no ATen), so the UI's side of the engine can hold them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace engram {

struct TurnProgress {
  enum class Stage : uint8_t {
    kIndexing,   // embedding the conversation's windows (done / total windows)
    kBuilding,   // an episode's cache from the history (done / total tokens of the prefill)
    kReading,    // the turn's own prefill (done / total tokens)
    kPreparing,  // between turns: a waiting episode brought up to the conversation (tokens)
  };
  Stage stage = Stage::kReading;
  int32_t episode = -1;  // kBuilding, kPreparing: the episode (0-based) of `episodes`
  int32_t episodes = 0;
  int64_t done = 0;
  int64_t total = 0;
};

using TurnProgressFn = std::function<void(const TurnProgress&)>;

// One line for the person: "Building episode 2 of 4 from the history: 12,288 of 20,017 tokens".
std::string describe_turn_progress(const TurnProgress& progress);

}  // namespace engram
