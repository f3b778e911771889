// The OxyGen frame loop (DESIGN.md, "OxyGen"): an embodied agent observes its world once per
// frame and runs several tasks on that observation. The action (the next skill) has a hard
// deadline in every frame; language tasks (narration, memory notes, the person's chat turn) have
// soft deadlines and may take many frames.
//
// Unified execution (cross-task KV sharing + cross-frame continuous batching):
//   1. the tasks' prompts share the observation: their longest common prefix is prefilled once
//      (and, with reuse_prefix, only from where it differs from the last frame's prefix);
//   2. the action continues on that cache in place (its own suffix, then greedy decode);
//   3. every new language request starts from a copy of the shared prefix (its suffix prefilled
//      alone), joins the batch of requests still running from earlier frames;
//   4. the batch decodes one token per request per step while the frame has time left (at a
//      rate: the step-time estimate must fit before the next frame's tick; without a rate: a
//      fixed `language_steps`), then stops; the requests resume in the next frame where they
//      stopped (their KV and logits are kept: no recompute).
// Isolated execution (the baseline): every task prefills its whole prompt alone and decodes to
// the end, one after another, the action first.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/batched_decode.h"
#include "core/engine/generation_state.h"

namespace engram {

class EngineObserver;

// One task's prompt as the model expects it (BOS included) and how its answer ends.
struct TaskPrompt {
  std::string task;  // "action", "narration", "memory_note", "chat", ...
  std::vector<int64_t> ids;
  GenerationLimits limits;
};

struct Frame {
  TaskPrompt action;
  std::vector<TaskPrompt> language;  // requests this frame starts
};

// What the loop runs against (the household simulator in engram-cli bench oxygen).
class FrameWorld {
 public:
  virtual ~FrameWorld() = default;
  // The observation of frame `index`; nullopt ends the run.
  virtual std::optional<Frame> observe(int64_t index) = 0;
  // The action chosen in frame `index` (the world steps before the next observation).
  virtual void act(int64_t index, const GenerationState& action) = 0;
  // A language request finished during frame `index` (or after the last frame: the drain).
  virtual void language_done(int64_t /*index*/, const GenerationState& /*request*/) {}
};

enum class FrameWork : uint8_t { kPrefill, kDecode, kBatchedStep };

// Time for the scheduler. The steady clock is the wall clock; a test injects a clock that
// advances by a cost model (charge() is called after every piece of work) so deadlines are
// deterministic.
class FrameClock {
 public:
  virtual ~FrameClock() = default;
  virtual double now_ms() = 0;
  virtual void wait_until_ms(double t) = 0;
  virtual void charge(FrameWork /*work*/, int64_t /*rows*/, int64_t /*tokens*/) {}
};

class SteadyFrameClock : public FrameClock {
 public:
  SteadyFrameClock();
  double now_ms() override;
  void wait_until_ms(double t) override;

 private:
  int64_t origin_ns_;
};

enum class ExecutionMode : uint8_t { kUnified, kIsolated };
const char* execution_mode_name(ExecutionMode mode);

struct FrameLoopOptions {
  ExecutionMode mode = ExecutionMode::kUnified;
  double action_hz = 0;           // frame rate; 0 = as fast as possible (no ticks, no deadline)
  double action_deadline_ms = 0;  // the action's deadline after its tick; 0 = one frame period
  int64_t language_steps = 5;     // batched steps per frame when action_hz == 0 (the paper's k)
  double step_margin = 1.2;       // a step is started when margin x its estimate fits
  bool drain = true;              // finish the language requests after the last frame
  // Unified: keep the last frame's prefix KV and compute only where the new observation differs
  // (an Engram addition; the paper's two optimizations alone: false).
  bool reuse_prefix = true;
  // Decode through recorded graph steps (static_decode_step.h), in both modes: batch 1 for the
  // action and isolated requests (over one cache kept from task to task, so the graph is recorded
  // once), the batched step for the language requests. kOnCuda (default): on CUDA only; kAlways:
  // on the CPU too (the same code runs directly: tests); kNever: the per-layer path.
  BatchedStates::RecordedStep recorded_step = BatchedStates::RecordedStep::kOnCuda;
  // Per-frame intervals: layer -1, phase "frame" ("isolated_frame"), step = frame index.
  EngineObserver* observer = nullptr;
};

struct FrameRecord {
  int64_t index = 0;
  double tick_ms = 0;   // when the observation arrived (the frame's start when no rate)
  double start_ms = 0;  // when the loop started on it (later than the tick when behind)
  double action_done_ms = 0;
  double end_ms = 0;
  bool missed = false;         // the action finished after tick + deadline
  int64_t prefill_tokens = 0;  // prompt tokens computed in this frame (all tasks)
  int64_t shared_tokens = 0;   // the tasks' common prefix, computed once (unified)
  int64_t reused_tokens = 0;   // of which kept from the last frame's prefix (reuse_prefix)
  int64_t action_tokens = 0;
  int64_t language_steps = 0;   // batched steps (unified) or decode steps (isolated)
  int64_t language_tokens = 0;  // language tokens chosen in this frame
  int64_t active_requests = 0;  // language requests in flight when the frame ended
};

struct LanguageRecord {
  int64_t id = 0;
  std::string task;
  int64_t frame_started = 0;
  int64_t frame_done = -1;  // -1: not finished (no drain)
  double started_ms = 0;
  double done_ms = 0;
  int64_t prompt_tokens = 0;
  int64_t tokens = 0;
  std::string stop_reason;
};

struct FrameLoopReport {
  ExecutionMode mode = ExecutionMode::kUnified;
  double action_hz_target = 0;
  std::vector<FrameRecord> frames;
  std::vector<LanguageRecord> language;
  int64_t deadline_misses = 0;
  double frames_ms = 0;  // first frame's start to the last frame's end
  double total_ms = 0;   // including the drain
  double action_hz = 0;  // frames / frames_ms
  int64_t language_tokens = 0;
  double language_tokens_per_s = 0;  // language tokens / total_ms
  int64_t prefill_tokens = 0;
  int64_t forward_passes = 0;
  int64_t max_batch_rows = 0;
  int64_t graph_recordings = 0;        // recorded decode steps recorded (batch 1 + batched; CUDA)
  double worst_action_latency_ms = 0;  // tick to action done
  double mean_action_latency_ms = 0;
};

// Runs frames until the world has none (or `max_frames`, when > 0). Greedy decoding throughout.
FrameLoopReport run_frame_loop(const Decoder& decoder, FrameWorld& world, FrameClock& clock,
                               const FrameLoopOptions& options, int64_t max_frames = 0);

// The longest common prefix of the prompts, at most the shortest minus one token (every task
// keeps a token of its own to produce its first logits).
int64_t shared_prefix_length(const std::vector<const std::vector<int64_t>*>& prompts);

}  // namespace engram
