// engram-cli bench oxygen: several tasks from one observation per frame on the household world
// (app/cli/oxygen_household.h), unified (one shared prefill, cross-frame continuous batching) vs
// isolated execution (every task prefills its own prompt and decodes alone, in turn), on the same
// frames: the action is greedy and batch 1 in both modes, so the world takes the same steps.
//
// Without --action-hz the frames run back to back (the paper's throughput setting; unified
// decodes --language-steps batched steps per frame) and the language requests still running after
// the last frame are finished (drain), so both modes do the same work and the speedup is the
// ratio of their total times. With --action-hz each frame starts at its tick, the action must be
// done one period later (or --deadline-ms), and unified decodes language while a step still fits
// before the next tick. Prints and writes JSON; never asserts a time (style rule 10).
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/cli/bench_report.h"
#include "app/cli/commands.h"
#include "app/cli/model_loading.h"
#include "app/cli/oxygen_household.h"
#include "core/engine/frame_loop.h"
#include "core/log.h"
#include "core/trace/trace_file_writer.h"
#include "gpu/device_info.h"

namespace engram::cli {
namespace {

nlohmann::json report_json(const FrameLoopReport& r, const HouseholdFrames& world) {
  nlohmann::json j;
  j["mode"] = execution_mode_name(r.mode);
  j["frames"] = r.frames.size();
  j["action_hz_target"] = r.action_hz_target;
  j["action_hz"] = r.action_hz;
  j["deadline_misses"] = r.deadline_misses;
  j["mean_action_latency_ms"] = r.mean_action_latency_ms;
  j["worst_action_latency_ms"] = r.worst_action_latency_ms;
  j["frames_ms"] = r.frames_ms;
  j["total_ms"] = r.total_ms;
  j["language_tokens"] = r.language_tokens;
  j["language_tokens_per_s"] = r.language_tokens_per_s;
  j["prefill_tokens"] = r.prefill_tokens;
  j["forward_passes"] = r.forward_passes;
  j["max_batch_rows"] = r.max_batch_rows;
  j["graph_recordings"] = r.graph_recordings;
  // Per task: requests, finished, tokens, latency from start to done (ms and frames).
  struct Sum {
    int64_t requests = 0, finished = 0, tokens = 0;
    double ms = 0, frames = 0;
  };
  std::map<std::string, Sum> by_task;
  for (const LanguageRecord& l : r.language) {
    Sum& s = by_task[l.task];
    ++s.requests;
    s.tokens += l.tokens;
    if (l.frame_done >= 0) {
      ++s.finished;
      s.ms += l.done_ms - l.started_ms;
      s.frames += static_cast<double>(l.frame_done - l.frame_started);
    }
  }
  for (const auto& [task, s] : by_task) {
    const double n = std::max<double>(1, static_cast<double>(s.finished));
    j["language"][task] = {{"requests", s.requests},
                           {"finished", s.finished},
                           {"tokens", s.tokens},
                           {"mean_latency_ms", s.ms / n},
                           {"mean_latency_frames", s.frames / n}};
  }
  nlohmann::json frames = nlohmann::json::array();
  for (const FrameRecord& f : r.frames) {
    frames.push_back({{"i", f.index},
                      {"tick_ms", f.tick_ms},
                      {"start_ms", f.start_ms},
                      {"action_done_ms", f.action_done_ms},
                      {"end_ms", f.end_ms},
                      {"missed", f.missed},
                      {"prefill_tokens", f.prefill_tokens},
                      {"shared_tokens", f.shared_tokens},
                      {"reused_tokens", f.reused_tokens},
                      {"action_tokens", f.action_tokens},
                      {"language_steps", f.language_steps},
                      {"language_tokens", f.language_tokens},
                      {"active_requests", f.active_requests}});
  }
  j["per_frame"] = frames;
  j["memory_notes"] = world.notes().segments().size();
  nlohmann::json samples = nlohmann::json::array();
  for (const FinishedText& t : world.finished()) {
    if (samples.size() >= 6) break;
    samples.push_back({{"frame", t.frame}, {"task", t.task}, {"text", t.text}});
  }
  j["sample_texts"] = samples;
  j["actions_first"] = std::vector<std::string>(
      world.actions().begin(),
      world.actions().begin() + std::min<size_t>(world.actions().size(), 6));
  j["tasks_ended"] = world.tasks_ended();
  j["tasks_succeeded"] = world.tasks_succeeded();
  return j;
}

}  // namespace

int run_bench_oxygen(int argc, char** argv) {
  auto with_value = model_flags_with_value();
  with_value.insert({"tokenizer", "frames", "action-hz", "deadline-ms", "mode", "language-steps",
                     "narrate-every", "note-every", "chat-every", "world-seed", "warmup", "json",
                     "trace", "repeat", "action-tokens", "narration-tokens", "note-tokens",
                     "chat-tokens"});
  const Args args(argc, argv, 2, with_value, {"no-prefix-reuse", "per-layer"});
  if (args.positional() != std::vector<std::string>{"oxygen"})
    throw UsageError("bench oxygen takes no other positional arguments");
  require_model_or_shape(args, "bench oxygen");
  const bool use_shape = args.has("shape");
  const std::string mode = args.str("mode", "both");
  if (mode != "unified" && mode != "isolated" && mode != "both")
    throw UsageError("--mode is unified, isolated or both");
  const int64_t frames = args.integer("frames", 32);
  if (frames < 1) throw UsageError("--frames must be at least 1");
  FrameLoopOptions options;
  options.action_hz = args.real("action-hz", 0);
  options.action_deadline_ms = args.real("deadline-ms", 0);
  options.language_steps = args.integer("language-steps", 5);
  options.reuse_prefix = !args.has("no-prefix-reuse");
  if (args.has("per-layer")) options.recorded_step = BatchedStates::RecordedStep::kNever;
  if (options.action_hz < 0 || options.language_steps < 1)
    throw UsageError("--action-hz must be >= 0 and --language-steps >= 1");
  HouseholdFrameOptions world_options;
  world_options.seed = static_cast<uint64_t>(args.integer("world-seed", 1));
  world_options.narrate_every = args.integer("narrate-every", world_options.narrate_every);
  world_options.note_every = args.integer("note-every", world_options.note_every);
  world_options.chat_every = args.integer("chat-every", world_options.chat_every);
  world_options.action_tokens = args.integer("action-tokens", world_options.action_tokens);
  world_options.narration_tokens = args.integer("narration-tokens", world_options.narration_tokens);
  world_options.note_tokens = args.integer("note-tokens", world_options.note_tokens);
  world_options.chat_tokens = args.integer("chat-tokens", world_options.chat_tokens);
  if (world_options.action_tokens < 1 || world_options.narration_tokens < 1 ||
      world_options.note_tokens < 1 || world_options.chat_tokens < 1)
    throw UsageError("token limits must be at least 1");
  const int64_t warmup = args.integer("warmup", 2);
  const int64_t repeat = std::max<int64_t>(1, args.integer("repeat", 1));

  const LoadedModel model = load_model_or_shape(
      args, "bench oxygen", choose_device(args.str("device", "auto"), args.str("dtype", "auto")));
  std::unique_ptr<TraceFileWriter> trace;
  if (args.has("trace")) trace = std::make_unique<TraceFileWriter>(args.str("trace", ""));

  // Warm-up frames (allocator, first-call costs) on a world of another seed, not measured.
  if (warmup > 0) {
    HouseholdFrameOptions w = world_options;
    w.seed += 1000;
    SteadyFrameClock clock;
    FrameLoopOptions o = options;
    o.action_hz = 0;
    for (ExecutionMode m : {ExecutionMode::kUnified, ExecutionMode::kIsolated}) {
      o.mode = m;
      HouseholdFrames fresh(model, w);
      run_frame_loop(*model.decoder, fresh, clock, o, warmup);
    }
  }

  nlohmann::json out;
  out["benchmark"] = "engram-oxygen";
  out["model"] = model.name;
  if (use_shape) {
    out["shape_note"] = "random weights (seed " + std::to_string(args.integer("seed", 0)) +
                        ") of the named shape; prompts tokenized with " +
                        args.str("tokenizer", "") +
                        "; random weights rarely end a line, so requests run to their limits";
  }
  const gpu::DeviceInfo info = gpu::device_info(model.decoder->device());
  out["device"] = info.name;
  out["torch"] = info.torch_version;
  out["dtype"] = c10::toString(model.decoder->dtype());
  out["frames"] = frames;
  out["repeat"] = repeat;
  out["prefix_reuse_across_frames"] = options.reuse_prefix;
  out["decode_path"] = BatchedStates::records(options.recorded_step, model.decoder->device())
                           ? "recorded graph steps (batch 1 and batched)"
                           : "per-layer";
  out["action_hz_target"] = options.action_hz;
  out["language_steps_per_frame"] = options.action_hz > 0 ? nlohmann::json("until the next tick")
                                                          : nlohmann::json(options.language_steps);
  out["schedule"] = {{"narrate_every", world_options.narrate_every},
                     {"note_every", world_options.note_every},
                     {"chat_every", world_options.chat_every},
                     {"world_seed", world_options.seed},
                     {"max_tokens",
                      {{"action", world_options.action_tokens},
                       {"narration", world_options.narration_tokens},
                       {"memory_note", world_options.note_tokens},
                       {"chat", world_options.chat_tokens}}}};
  // Runs alternate isolated / unified `repeat` times (a shared machine's load drifts); each
  // mode's detailed report is its run of median total time, the speedups are ratios of medians.
  std::map<std::string, FrameLoopReport> reports;
  std::map<std::string, std::vector<double>> totals, hz, tps;
  std::map<std::string, std::vector<FrameLoopReport>> all;
  std::map<std::string, std::vector<nlohmann::json>> details;
  for (int64_t run = 0; run < repeat; ++run) {
    for (ExecutionMode m : {ExecutionMode::kIsolated, ExecutionMode::kUnified}) {
      const std::string name = execution_mode_name(m);
      if (mode != "both" && mode != name) continue;
      HouseholdFrames world(model, world_options);
      SteadyFrameClock clock;
      FrameLoopOptions o = options;
      o.mode = m;
      o.observer = run == 0 ? trace.get() : nullptr;
      FrameLoopReport r = run_frame_loop(*model.decoder, world, clock, o, frames);
      std::fprintf(stderr,
                   "%-8s %lld frames: action %.2f Hz, %lld deadline misses, language %.1f tok/s "
                   "(%lld tokens), total %.0f ms, %lld graph recordings\n",
                   name.c_str(), static_cast<long long>(r.frames.size()), r.action_hz,
                   static_cast<long long>(r.deadline_misses), r.language_tokens_per_s,
                   static_cast<long long>(r.language_tokens), r.total_ms,
                   static_cast<long long>(r.graph_recordings));
      totals[name].push_back(r.total_ms);
      hz[name].push_back(r.action_hz);
      tps[name].push_back(r.language_tokens_per_s);
      details[name].push_back(report_json(r, world));
      all[name].push_back(std::move(r));
    }
  }
  for (const auto& [name, t] : totals) {
    std::vector<size_t> order(t.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::sort(order.begin(), order.end(), [&t](size_t a, size_t b) { return t[a] < t[b]; });
    const size_t median = order[(order.size() - 1) / 2];
    reports[name] = all[name][median];
    out[name] = details[name][median];
    out[name]["runs_total_ms"] = t;
    out[name]["runs_action_hz"] = hz[name];
    out[name]["runs_language_tokens_per_s"] = tps[name];
  }
  if (reports.size() == 2) {
    const FrameLoopReport& iso = reports["isolated"];
    const FrameLoopReport& uni = reports["unified"];
    out["speedup_total_time"] = iso.total_ms / std::max(uni.total_ms, 1e-9);
    out["speedup_action_hz"] = uni.action_hz / std::max(iso.action_hz, 1e-9);
    out["speedup_language_tokens_per_s"] =
        uni.language_tokens_per_s / std::max(iso.language_tokens_per_s, 1e-9);
    out["same_language_tokens"] = iso.language_tokens == uni.language_tokens;
    std::fprintf(stderr, "unified vs isolated: %.2fx total time, %.2fx action Hz\n",
                 out["speedup_total_time"].get<double>(), out["speedup_action_hz"].get<double>());
  }
  emit_bench_report(out, args);
  return 0;
}

}  // namespace engram::cli
