#include "core/engine/frame_loop.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <thread>

#include "core/engine/batched_decode.h"
#include "core/engine/generator.h"
#include "core/runtime/decoder.h"
#include "core/runtime/static_decode_step.h"
#include "core/trace/trace_recorder.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"

namespace engram {
namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

KvCacheShape shape_of(const Decoder& decoder) {
  const ModelConfig& c = decoder.config();
  return {c.num_layers, c.num_kv_heads, c.head_dim};
}

std::unique_ptr<KvCache> empty_cache(const Decoder& decoder, int64_t capacity) {
  return std::make_unique<KvCache>(shape_of(decoder), 1, recorded_capacity(capacity),
                                   decoder.dtype(), decoder.device());
}

// Batched step time by batch rows, for "does one more step fit before the tick". Rows not seen
// yet are estimated from the nearest measured smaller batch scaled by rows (an overestimate on
// accelerators, where a step costs about the same for a few rows).
class StepTimes {
 public:
  void add(int64_t rows, double ms) {
    auto [it, fresh] = ema_.emplace(rows, ms);
    if (!fresh) it->second = 0.7 * it->second + 0.3 * std::max(ms, 0.0);
  }
  void seed_single(double ms) {
    if (!ema_.count(1)) ema_.emplace(1, ms);
  }
  std::optional<double> estimate(int64_t rows) const {
    if (ema_.empty()) return std::nullopt;
    if (auto it = ema_.find(rows); it != ema_.end()) return it->second;
    auto below = ema_.lower_bound(rows);
    if (below == ema_.begin()) return below->second;  // only larger batches measured
    --below;
    return below->second * static_cast<double>(rows) / static_cast<double>(below->first);
  }

 private:
  std::map<int64_t, double> ema_;
};

class FrameRun {
 public:
  FrameRun(const Decoder& decoder, FrameWorld& world, FrameClock& clock,
           const FrameLoopOptions& options)
      : decoder_(decoder), world_(world), clock_(clock), options_(options) {
    report_.mode = options.mode;
    report_.action_hz_target = options.action_hz;
    period_ms_ = options.action_hz > 0 ? 1000.0 / options.action_hz : 0;
    deadline_ms_ = options.action_deadline_ms > 0 ? options.action_deadline_ms : period_ms_;
    batch_.set_recorded_step(options.recorded_step);
  }

  FrameLoopReport run(int64_t max_frames) {
    t0_ = clock_.now_ms();
    double tick = t0_;
    int64_t index = 0;
    for (; max_frames <= 0 || index < max_frames; ++index) {
      if (period_ms_ > 0) clock_.wait_until_ms(tick);
      std::optional<Frame> frame = world_.observe(index);
      if (!frame) break;
      FrameRecord rec;
      rec.index = index;
      rec.start_ms = clock_.now_ms() - t0_;
      rec.tick_ms = period_ms_ > 0 ? tick - t0_ : rec.start_ms;
      frame_end_ = period_ms_ > 0 ? tick + period_ms_ : 0;
      begin_trace(index);
      if (options_.mode == ExecutionMode::kUnified)
        unified_frame(index, *frame, rec);
      else
        isolated_frame(index, *frame, rec);
      end_trace();
      rec.end_ms = clock_.now_ms() - t0_;
      rec.active_requests = static_cast<int64_t>(active_.size());
      report_.frames.push_back(rec);
      tick += period_ms_;
    }
    const double frames_end = clock_.now_ms();
    if (options_.drain && !active_.empty()) {
      begin_trace(index);
      frame_end_ = 0;
      while (!active_.empty())
        language_phase(index, nullptr, /*unbounded=*/true);
      end_trace();
    }
    finish(frames_end);
    return report_;
  }

 private:
  // --- unified: one shared prefill, the action in place, continuous batching -------------
  void unified_frame(int64_t index, Frame& frame, FrameRecord& rec) {
    std::vector<const std::vector<int64_t>*> prompts{&frame.action.ids};
    for (const TaskPrompt& t : frame.language)
      prompts.push_back(&t.ids);
    const int64_t shared = shared_prefix_length(prompts);
    const std::vector<int64_t> prefix(frame.action.ids.begin(), frame.action.ids.begin() + shared);
    const auto action_suffix = static_cast<int64_t>(frame.action.ids.size()) - shared;

    // Across frames: the observation usually starts as the last one did (examples, rooms, ...):
    // the last frame's prefix KV is kept, cut back to what still matches, and only the rest is
    // computed. KV of a token depends only on the tokens before it, so this is exact.
    int64_t reused = 0;
    std::unique_ptr<KvCache> kv;
    const int64_t room = action_suffix + frame.action.limits.max_new_tokens;
    if (options_.reuse_prefix && last_prefix_kv_) {
      const auto n = static_cast<int64_t>(std::min(last_prefix_ids_.size(), prefix.size()));
      while (reused < n && last_prefix_ids_[reused] == prefix[reused])
        ++reused;
    }
    if (reused > 0) {
      kv = std::move(last_prefix_kv_);
      kv->truncate(0, reused);
      kv->ensure_room(shared - reused + room);
    } else {
      kv = empty_cache(decoder_, shared + room);
    }
    last_prefix_kv_.reset();
    rec.shared_tokens = shared;
    rec.reused_tokens = reused;
    // One forward computes the observation's new part and the action's own suffix: the KV of the
    // prefix does not depend on the tokens after it, so the cache is cut back to it afterwards.
    std::vector<int64_t> first(prefix.begin() + reused, prefix.end());
    first.insert(first.end(), frame.action.ids.begin() + shared, frame.action.ids.end());
    GenerationState action(next_id_++, frame.action.task, frame.action.limits);
    auto open = trace_begin("prefill");
    prefill_action(action, std::move(kv), first, rec);
    trace_end(open, static_cast<int64_t>(first.size()));
    auto decoding = trace_begin("action");
    decode_action(index, action, rec, decoding);
    std::unique_ptr<KvCache> shared_kv = action.take_kv(StateLocation::kReleased);
    shared_kv->truncate(0, shared);

    // The new language requests join the batch from copies of the prefix; their suffixes are
    // prefilled together, in one forward.
    std::vector<BatchedStates::Spawn> spawns;
    int64_t suffix_tokens = 0;
    for (TaskPrompt& t : frame.language) {
      auto state = std::make_shared<GenerationState>(next_id_++, t.task, t.limits);
      spawns.push_back({state, std::vector<int64_t>(t.ids.begin() + shared, t.ids.end())});
      suffix_tokens += static_cast<int64_t>(spawns.back().suffix.size());
    }
    if (!spawns.empty()) {
      auto o = trace_begin("spawn");
      batch_.spawn(decoder_, *shared_kv, 0, spawns, language_reserve(), *timeline_);
      count_forward(suffix_tokens);
      clock_.charge(FrameWork::kPrefill, static_cast<int64_t>(spawns.size()), suffix_tokens);
      trace_end(o, suffix_tokens);
      rec.prefill_tokens += suffix_tokens;
      for (size_t i = 0; i < spawns.size(); ++i) {
        spawns[i].state->set_prompt_tokens(static_cast<int64_t>(frame.language[i].ids.size()));
        start_language(index, spawns[i].state);
      }
    }
    if (options_.reuse_prefix) {
      last_prefix_kv_ = std::move(shared_kv);
      last_prefix_ids_ = prefix;
    }
    shared_kv.reset();
    language_phase(index, &rec, /*unbounded=*/false);
  }

  // Batched steps over every request in flight until the frame's time is up (or k steps).
  void language_phase(int64_t index, FrameRecord* rec, bool unbounded) {
    batch_.rebatch(active_, language_reserve());
    report_.max_batch_rows = std::max(report_.max_batch_rows, batch_.rows());
    int64_t steps = 0;
    while (batch_.active_rows() > 0) {
      if (!unbounded) {
        if (period_ms_ > 0) {
          const std::optional<double> est = step_times_.estimate(batch_.active_rows());
          // Nothing measured yet: one step if the frame has any time left.
          const double now = clock_.now_ms();
          if (est ? now + options_.step_margin * *est > frame_end_ : now >= frame_end_) break;
        } else if (steps >= options_.language_steps) {
          break;
        }
      }
      const int64_t rows = batch_.active_rows();
      auto o = trace_begin("language_step");
      const double t = clock_.now_ms();
      const int64_t chosen = batch_.step(decoder_, *timeline_, nullptr);
      ++report_.forward_passes;
      clock_.charge(FrameWork::kBatchedStep, rows, chosen);
      step_times_.add(rows, clock_.now_ms() - t);
      trace_end(o, rows);
      ++steps;
      if (rec) rec->language_tokens += chosen;
      report_.language_tokens += chosen;
      // Finished requests leave the active list now; their rows go at the next rebatch.
      for (auto it = active_.begin(); it != active_.end();) {
        if ((*it)->done()) {
          finish_language(index, **it);
          it = active_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (rec) rec->language_steps += steps;
    // The last step's forward is still queued on an accelerator: finish it inside this frame.
    if (steps > 0) gpu::synchronize(decoder_.device());
  }

  int64_t language_reserve() const { return std::max<int64_t>(options_.language_steps, 8); }

  // --- isolated: every task alone, whole prompt, to the end -------------------------------
  void isolated_frame(int64_t index, Frame& frame, FrameRecord& rec) {
    GenerationState action(next_id_++, frame.action.task, frame.action.limits);
    run_action(index, action,
               solo_cache(static_cast<int64_t>(frame.action.ids.size()) +
                          frame.action.limits.max_new_tokens),
               frame.action.ids, rec);
    solo_kv_ = action.take_kv(StateLocation::kReleased);
    for (TaskPrompt& t : frame.language) {
      auto state = std::make_shared<GenerationState>(next_id_++, t.task, t.limits);
      const auto n = static_cast<int64_t>(t.ids.size());
      auto o = trace_begin("spawn");
      state->prefill(decoder_, solo_cache(n + t.limits.max_new_tokens), t.ids, *timeline_, nullptr);
      count_forward(n);
      clock_.charge(FrameWork::kPrefill, 1, n);
      trace_end(o, n);
      rec.prefill_tokens += n;
      start_language(index, state);
      auto d = trace_begin("language_decode");
      const int64_t chosen = decode_alone(*state);
      trace_end(d, chosen);
      rec.language_steps += chosen;
      rec.language_tokens += chosen;
      report_.language_tokens += chosen;
      finish_language(index, *state);
      solo_kv_ = state->take_kv(StateLocation::kReleased);
      active_.clear();
    }
  }

  // Isolated execution's tasks run one after another in one cache (emptied, grown when a task
  // needs more), as a static-cache decoder would: the recorded step is recorded once, not per task.
  std::unique_ptr<KvCache> solo_cache(int64_t slots) {
    if (!solo_kv_) return empty_cache(decoder_, slots);
    std::unique_ptr<KvCache> kv = std::move(solo_kv_);
    kv->truncate(0, 0);
    kv->ensure_room(slots);
    return kv;
  }

  // --- shared pieces ------------------------------------------------------------------------
  void run_action(int64_t index, GenerationState& action, std::unique_ptr<KvCache> kv,
                  const std::vector<int64_t>& prompt, FrameRecord& rec) {
    auto o = trace_begin("action");
    prefill_action(action, std::move(kv), prompt, rec);
    decode_action(index, action, rec, o);
  }

  // The action's prompt tokens that are not in `kv` yet, in one forward.
  void prefill_action(GenerationState& action, std::unique_ptr<KvCache> kv,
                      const std::vector<int64_t>& tokens, FrameRecord& rec) {
    const auto n = static_cast<int64_t>(tokens.size());
    action.prefill(decoder_, std::move(kv), tokens, *timeline_, nullptr);
    count_forward(n);
    clock_.charge(FrameWork::kPrefill, 1, n);
    rec.prefill_tokens += n;
  }

  // Greedy to the end of its line, then the deadline check and the world's step. `open`: the
  // trace interval that ends with the decode.
  void decode_action(int64_t index, GenerationState& action, FrameRecord& rec,
                     TraceRecorder::Open open) {
    const double t = clock_.now_ms();
    const int64_t chosen = decode_alone(action);
    if (chosen > 1)
      step_times_.seed_single((clock_.now_ms() - t) / static_cast<double>(chosen - 1));
    trace_end(open, chosen);
    rec.action_tokens = chosen;
    rec.action_done_ms = clock_.now_ms() - t0_;
    if (period_ms_ > 0 && rec.action_done_ms > rec.tick_ms + deadline_ms_) {
      rec.missed = true;
      ++report_.deadline_misses;
    }
    world_.act(index, action);
  }

  // Greedy decode to the end, batch 1, one forward per fed token.
  int64_t decode_alone(GenerationState& s) {
    int64_t chosen = 0;
    while (!s.done()) {
      const int64_t before = static_cast<int64_t>(s.tokens().size());
      s.decode_alone(decoder_, 1, *timeline_, nullptr, solo_step(s));
      chosen += static_cast<int64_t>(s.tokens().size()) - before;
      if (!s.done()) {
        ++report_.forward_passes;
        clock_.charge(FrameWork::kDecode, 1, 1);
      }
    }
    return chosen;
  }

  // The recorded batch-1 step (CUDA), created for the first request that decodes alone.
  StaticDecodeStep* solo_step(GenerationState& s) {
    if (!BatchedStates::records(options_.recorded_step, decoder_.device())) return nullptr;
    if (!solo_step_) solo_step_ = std::make_unique<StaticDecodeStep>(decoder_, *s.kv());
    return solo_step_.get();
  }

  void start_language(int64_t index, const std::shared_ptr<GenerationState>& s) {
    LanguageRecord r;
    r.id = s->id();
    r.task = s->task();
    r.frame_started = index;
    r.started_ms = clock_.now_ms() - t0_;
    r.prompt_tokens = s->prompt_tokens();
    records_.emplace(s->id(), report_.language.size());
    report_.language.push_back(r);
    active_.push_back(s);
  }

  void finish_language(int64_t index, const GenerationState& s) {
    LanguageRecord& r = report_.language.at(records_.at(s.id()));
    r.frame_done = index;
    r.done_ms = clock_.now_ms() - t0_;
    r.tokens = static_cast<int64_t>(s.tokens().size());
    r.stop_reason = s.stop_reason();
    world_.language_done(index, s);
  }

  void count_forward(int64_t tokens) {
    ++report_.forward_passes;
    report_.prefill_tokens += tokens;
  }

  void finish(double frames_end) {
    report_.graph_recordings = batch_.recordings() + (solo_step_ ? solo_step_->recordings() : 0);
    batch_.unbatch();
    const double end = clock_.now_ms();
    report_.frames_ms = frames_end - t0_;
    report_.total_ms = end - t0_;
    const auto n = static_cast<double>(report_.frames.size());
    report_.action_hz = report_.frames_ms > 0 ? 1000.0 * n / report_.frames_ms : 0;
    report_.language_tokens_per_s =
        report_.total_ms > 0
            ? 1000.0 * static_cast<double>(report_.language_tokens) / report_.total_ms
            : 0;
    double sum = 0;
    for (const FrameRecord& f : report_.frames) {
      const double latency = f.action_done_ms - f.tick_ms;
      sum += latency;
      report_.worst_action_latency_ms = std::max(report_.worst_action_latency_ms, latency);
    }
    report_.mean_action_latency_ms = n > 0 ? sum / n : 0;
  }

  // Frame events: one recorder per frame, intervals on layer -1 with phase "frame".
  void begin_trace(int64_t index) {
    timeline_ = std::make_unique<gpu::DeviceTimeline>(decoder_.device());
    if (!options_.observer) return;
    trace_ = std::make_unique<TraceRecorder>(*timeline_, options_.observer, next_request_id());
    trace_->set_phase(options_.mode == ExecutionMode::kUnified ? "frame" : "isolated_frame", index);
  }
  void end_trace() {
    if (trace_) trace_->flush();
    trace_.reset();
  }
  TraceRecorder::Open trace_begin(const char* what) {
    return trace_ ? trace_->begin(-1, TraceLane::kCompute, what) : TraceRecorder::Open{};
  }
  void trace_end(TraceRecorder::Open open, int64_t tokens) {
    if (trace_) trace_->end(open, tokens);
  }

  const Decoder& decoder_;
  FrameWorld& world_;
  FrameClock& clock_;
  FrameLoopOptions options_;
  double period_ms_ = 0;
  double deadline_ms_ = 0;
  double t0_ = 0;
  double frame_end_ = 0;
  int64_t next_id_ = 1;
  std::unique_ptr<KvCache> last_prefix_kv_;  // the last frame's shared prefix (reuse_prefix)
  std::vector<int64_t> last_prefix_ids_;
  std::unique_ptr<KvCache> solo_kv_;  // isolated: the cache every task runs in, in turn
  std::unique_ptr<StaticDecodeStep> solo_step_;
  std::vector<std::shared_ptr<GenerationState>> active_;
  BatchedStates batch_;
  StepTimes step_times_;
  std::map<int64_t, size_t> records_;
  std::unique_ptr<gpu::DeviceTimeline> timeline_;
  std::unique_ptr<TraceRecorder> trace_;
  FrameLoopReport report_;
};

}  // namespace

SteadyFrameClock::SteadyFrameClock() : origin_ns_(steady_ns()) {}

double SteadyFrameClock::now_ms() {
  return static_cast<double>(steady_ns() - origin_ns_) / 1e6;
}

void SteadyFrameClock::wait_until_ms(double t) {
  const double now = now_ms();
  if (t > now) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(t - now));
}

const char* execution_mode_name(ExecutionMode mode) {
  return mode == ExecutionMode::kUnified ? "unified" : "isolated";
}

int64_t shared_prefix_length(const std::vector<const std::vector<int64_t>*>& prompts) {
  if (prompts.empty()) return 0;
  size_t shortest = prompts.front()->size();
  for (const auto* p : prompts)
    shortest = std::min(shortest, p->size());
  if (shortest == 0) throw std::invalid_argument("a task with an empty prompt");
  size_t n = 0;
  const std::vector<int64_t>& first = *prompts.front();
  for (; n + 1 < shortest; ++n) {
    const bool same = std::all_of(prompts.begin(), prompts.end(),
                                  [&](const auto* p) { return (*p)[n] == first[n]; });
    if (!same) break;
  }
  return static_cast<int64_t>(n);
}

FrameLoopReport run_frame_loop(const Decoder& decoder, FrameWorld& world, FrameClock& clock,
                               const FrameLoopOptions& options, int64_t max_frames) {
  FrameRun run(decoder, world, clock, options);
  return run.run(max_frames);
}

}  // namespace engram
