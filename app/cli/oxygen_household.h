// The household simulator as an OxyGen frame world (engram-cli bench oxygen): each frame is one
// simulator step. Its observation is the embodied planner's prompt (memory, task, history); the
// tasks on it are
//   action       the next skill line (the planner's contract; hard deadline every frame),
//   narration    "what are you doing?" answered in the chat format (soft deadline),
//   memory_note  a "note:" line about the scene; when it finishes it becomes a memory segment
//                (kind "note", key "note_<request id>") in notes(),
//   chat         the person's pending chat turn, when one is due.
// All language prompts are the observation followed by their own suffix, so they share its
// tokens with the action's prompt (the frame loop finds the common prefix on the ids).
// engram-tiny learned only the planner and the chat lines; the narration and notes are what it
// continues with (they measure the runtime, not the text).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/frame_loop.h"
#include "core/engine/loaded_model.h"
#include "core/env/embodied_memory.h"
#include "core/env/household_session.h"

namespace engram::cli {

struct HouseholdFrameOptions {
  uint64_t seed = 1;
  int tasks_per_session = 5;
  int64_t narrate_every = 1;  // frames between narration requests (0 = never)
  int64_t note_every = 4;     // frames between memory notes (0 = never)
  int64_t chat_every = 8;     // frames between the person's chat turns (0 = never)
  int64_t action_tokens = 24;
  int64_t narration_tokens = 24;
  int64_t note_tokens = 32;
  int64_t chat_tokens = 32;
  std::vector<std::string> chat_lines = {"What are you doing right now?",
                                         "Did you find what you were looking for?",
                                         "How is the task going?"};
};

struct FinishedText {
  int64_t frame = 0;
  std::string task;
  std::string text;
};

class HouseholdFrames : public FrameWorld {
 public:
  HouseholdFrames(const LoadedModel& model, HouseholdFrameOptions options);

  std::optional<Frame> observe(int64_t index) override;
  void act(int64_t index, const GenerationState& action) override;
  void language_done(int64_t index, const GenerationState& request) override;

  const env::EmbodiedMemory& notes() const { return notes_; }
  const std::vector<FinishedText>& finished() const { return finished_; }
  const std::vector<std::string>& actions() const { return actions_; }
  int64_t tasks_succeeded() const { return tasks_succeeded_; }
  int64_t tasks_ended() const { return tasks_ended_; }

 private:
  std::vector<int64_t> encode(const std::string& text) const;
  std::string line(const GenerationState& s) const;  // decoded up to the first newline
  GenerationLimits limits(int64_t max_tokens) const;

  const LoadedModel& model_;
  HouseholdFrameOptions options_;
  std::unique_ptr<env::HouseholdSession> session_;
  uint64_t next_seed_;
  env::EmbodiedMemory notes_;
  std::vector<FinishedText> finished_;
  std::vector<std::string> actions_;
  int64_t tasks_succeeded_ = 0;
  int64_t tasks_ended_ = 0;
};

}  // namespace engram::cli
