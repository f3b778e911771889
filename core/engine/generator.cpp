#include "core/engine/generator.h"

#include <ATen/record_function.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>

#include "core/kv/cache_kv_source.h"
#include "core/kv/prompt_units_beside_prefill.h"
#include "core/kv/retrieval_kv_source.h"
#include "core/policies/full_policy.h"
#include "core/runtime/static_decode_step.h"
#include "core/trace/trace_recorder.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"
#include "gpu/stream_fork.h"

namespace engram {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string positions_error(int64_t tokens, int64_t max_positions, const MemoryPolicy& policy) {
  return "the prompt has " + std::to_string(tokens) + " tokens; the model's maximum is " +
         std::to_string(max_positions) + " positions (policy '" + policy.name() +
         "' keeps every token; --policy streaming or snapkv continues past it)";
}

// Applies a policy's plan to the working set, as an "evict" interval on the trace.
void apply_plan(const KeepPlan& plan, KvWorkingSet& ws, const Decoder& decoder,
                TraceRecorder* trace) {
  RECORD_USER_SCOPE("engram::apply_plan");  // named regions in a --profile trace
  TraceRecorder::Open open;
  if (trace) open = trace->begin(-1, TraceLane::kCompute, "evict");
  const int64_t before = ws.tokens();
  ws.apply(plan, decoder.rope().inverse_frequencies());
  if (trace) trace->end(open, before - ws.tokens());
}

// Shrinks the working set to `target` slots through the policy; false when it cannot.
bool shrink_to(MemoryPolicy& policy, KvWorkingSet& ws, const Decoder& decoder, int64_t target,
               TraceRecorder* trace) {
  if (ws.tokens() <= target) return true;
  RECORD_USER_SCOPE("engram::shrink");
  ws.cache().restore_layers();  // a plan rewrites every layer: on the device, not over PCIe
  const std::optional<KeepPlan> plan = policy.shrink(ws.info(), target);
  if (!plan) return false;
  if (plan->kept() > target) throw std::logic_error(policy.name() + ": the plan keeps too much");
  apply_plan(*plan, ws, decoder, trace);
  return true;
}

// Whether the retrieval layers of the working set wait in host memory while a reply decodes.
bool offloads(const RetrievalSettings& s, const Decoder& decoder) {
  return s.offload > 0 || (s.offload < 0 && decoder.device().is_cuda());
}

// One forward of `tokens` at the working set's next positions, with the policy's hooks. The
// tokens' KV lands in the working set; attention sees it too, or what `retrieval` serves.
at::Tensor forward_block(const Decoder& decoder, MemoryPolicy& policy, KvWorkingSet& ws,
                         const std::vector<int64_t>& tokens, ForwardPhase phase, int64_t step,
                         gpu::DeviceTimeline& timeline, TraceRecorder* trace,
                         RetrievalKvSource* retrieval = nullptr,
                         const FinalLayerFn& on_final_layer = {}) {
  RECORD_USER_SCOPE("engram::forward_block");
  const int64_t len = static_cast<int64_t>(tokens.size());
  BlockInfo block;
  block.phase = phase;
  block.step = step;
  block.fresh_tokens = len;
  block.cached_tokens = ws.tokens();
  block.will_evict = policy.budget() > 0 && ws.tokens() + len > policy.budget();
  ForwardRequest req;
  req.phase = phase;
  req.tokens = {tokens};
  req.positions = {std::vector<int64_t>(len)};
  for (int64_t i = 0; i < len; ++i)
    req.positions[0][i] = ws.next_position() + i;
  req.probe_rows = policy.probe_rows(block);
  const bool policy_layers = !req.probe_rows.empty() || policy.wants_layers(phase);
  if (!policy.probe_probabilities()) req.probe_rows.clear();
  if (policy_layers || on_final_layer) {
    req.on_layer = [&](const LayerView& view) {
      if (policy_layers) policy.on_layer(view);
      if (on_final_layer) on_final_layer(view.layer, view.kv.keys.select(0, 0));
    };
  }
  CacheKvSource source(ws.cache());
  KvSource& attend = retrieval ? static_cast<KvSource&>(*retrieval) : source;
  at::Tensor logits = decoder.forward(req, attend, timeline, trace).logits;
  ws.appended(len);
  return logits;
}

// Patched-prompt scoring (MemoryPolicy::patch_tokens): forwards the policy's patch after the
// block just computed, every patch row probed, then drops the patch's KV again. The patch is the
// verbatim tail of the working set, so truncate() is exact there.
void score_with_patch(const Decoder& decoder, MemoryPolicy& policy, KvWorkingSet& ws,
                      const std::vector<int64_t>& patch, gpu::DeviceTimeline& timeline,
                      TraceRecorder* trace) {
  RECORD_USER_SCOPE("engram::score_with_patch");
  const int64_t len = static_cast<int64_t>(patch.size());
  const int64_t stream = ws.stream_tokens();
  ForwardRequest req;
  req.phase = ForwardPhase::kPrefill;
  req.tokens = {patch};
  req.positions = {std::vector<int64_t>(len)};
  if (policy.patch_probabilities()) req.probe_rows.resize(len);
  for (int64_t i = 0; i < len; ++i) {
    req.positions[0][i] = ws.next_position() + i;
    if (!req.probe_rows.empty()) req.probe_rows[i] = i;
  }
  req.on_layer = [&policy](const LayerView& view) { policy.on_layer(view); };
  CacheKvSource source(ws.cache());
  decoder.forward(req, source, timeline, trace);
  ws.appended(len);
  if (!ws.truncate(stream)) throw std::logic_error("prefill: the patch's KV could not be dropped");
}

}  // namespace

int64_t next_request_id() {
  static std::atomic<int64_t> next{1};
  return next++;
}

void evict_to_budget(const Decoder& decoder, MemoryPolicy& policy, KvWorkingSet& ws,
                     gpu::DeviceTimeline& timeline, TraceRecorder* trace) {
  if (policy.budget() <= 0 || ws.tokens() <= policy.budget()) return;
  // The patch scores every slot first. A working set a reply filled has no room for the patch:
  // it first drops the lowest-ranked of the last scores.
  const std::vector<int64_t> patch = policy.patch_tokens();
  const auto patch_room = static_cast<int64_t>(patch.size());
  if (!patch.empty()) {
    const int64_t capacity = ws.cache().capacity();
    if (ws.fixed_capacity() && ws.tokens() + patch_room > capacity &&
        !shrink_to(policy, ws, decoder, capacity - patch_room, trace)) {
      throw std::logic_error("prefill: the working set is full and the policy keeps it");
    }
    score_with_patch(decoder, policy, ws, patch, timeline, trace);
  }
  shrink_to(policy, ws, decoder, policy.budget(), trace);
}

int64_t prefill_room(const MemoryPolicy& policy, const KvWorkingSet& ws, int64_t chunk) {
  if (!ws.fixed_capacity()) return std::max<int64_t>(1, chunk);
  const auto patch =
      policy.budget() > 0 ? static_cast<int64_t>(policy.patch_tokens().size()) : int64_t{0};
  return std::max<int64_t>(1, std::min(chunk, ws.cache().capacity() - policy.budget() - patch));
}

at::Tensor prefill(const Decoder& decoder, MemoryPolicy& policy, KvWorkingSet& ws,
                   const std::vector<int64_t>& tokens, int64_t chunk, gpu::DeviceTimeline& timeline,
                   TraceRecorder* trace, int64_t reserve_when_full,
                   const FinalLayerFn& on_final_layer, const PrefillControl& control) {
  if (tokens.empty()) throw std::invalid_argument("prefill: no tokens");
  ws.cache().restore_layers();  // layers a retrieving decode left in host memory
  const int64_t max_positions = decoder.config().max_positions;
  const int64_t n = static_cast<int64_t>(tokens.size());
  chunk = chunk > 0 ? chunk : n;
  if (!ws.fixed_capacity()) ws.cache().ensure_room(n);
  at::Tensor logits;
  // A policy's scoring patch needs room beside the block (empty for most policies).
  const std::vector<int64_t> patch =
      policy.budget() > 0 ? policy.patch_tokens() : std::vector<int64_t>{};
  const auto patch_room = static_cast<int64_t>(patch.size());
  const bool when_full = reserve_when_full >= 0 && ws.fixed_capacity() && policy.budget() > 0;
  for (int64_t begin = 0; begin < n;) {
    if (control.cancel && control.cancel->load()) return {};
    const int64_t len = prefill_room(policy, ws, std::min(chunk, n - begin));
    if (ws.fixed_capacity()) {
      // A fixed working set holds the budget plus one block; make room when it does not.
      const int64_t capacity = ws.cache().capacity();
      const int64_t after = begin + len >= n ? reserve_when_full : 0;
      if (when_full && ws.tokens() > policy.budget() &&
          ws.tokens() + len + patch_room + after > capacity) {
        // Full: the shrink to the budget leaves room for the block and the patch (len <= room).
        evict_to_budget(decoder, policy, ws, timeline, trace);
      }
      if (ws.tokens() + len > ws.cache().capacity() &&
          !shrink_to(policy, ws, decoder, ws.cache().capacity() - len, trace)) {
        throw std::logic_error("prefill: the working set is full and the policy keeps it");
      }
    }
    if (ws.next_position() + len + patch_room > max_positions &&
        !shrink_to(policy, ws, decoder, max_positions - len - patch_room, trace)) {
      throw std::out_of_range(
          positions_error(ws.stream_tokens() + n - begin, max_positions, policy));
    }
    const std::vector<int64_t> block(tokens.begin() + begin, tokens.begin() + begin + len);
    const bool last = begin + len >= n;
    logits = forward_block(decoder, policy, ws, block, ForwardPhase::kPrefill, 0, timeline, trace,
                           nullptr, last ? on_final_layer : FinalLayerFn{});
    if (!when_full) evict_to_budget(decoder, policy, ws, timeline, trace);
    begin += len;
    if (control.on_progress) control.on_progress(begin, n);
  }
  return logits.view({-1});
}

GenerationResult generate(const Decoder& decoder, MemoryPolicy& policy, KvWorkingSet& ws,
                          const std::vector<int64_t>& history,
                          const std::vector<int64_t>& new_tokens, const GenerationOptions& options,
                          const TokenFn& on_token) {
  const ModelConfig& config = decoder.config();
  const bool bounded = policy.budget() > 0;
  const int64_t total = ws.next_position() + static_cast<int64_t>(new_tokens.size());
  if (!bounded && total + 1 > config.max_positions) {
    throw std::out_of_range(
        positions_error(ws.stream_tokens() + new_tokens.size(), config.max_positions, policy));
  }
  ws.cache().restore_layers();
  if (ws.stream_tokens() != static_cast<int64_t>(history.size())) {
    throw std::logic_error("generate: the working set does not hold exactly the history");
  }
  GenerationResult result;
  result.prompt_tokens = static_cast<int64_t>(new_tokens.size());
  const int64_t request = next_request_id();
  gpu::DeviceTimeline timeline(decoder.device());
  std::unique_ptr<TraceRecorder> trace;
  if (options.trace && options.observer) {
    trace = std::make_unique<TraceRecorder>(timeline, options.observer, request);
  }
  Sampler sampler(options.sampling);
  std::vector<int64_t> all = history;
  all.insert(all.end(), new_tokens.begin(), new_tokens.end());
  const int64_t evicted_before = ws.evicted_tokens();
  ws.reset_peak();
  policy.begin_request(ws.info());

  const auto t0 = Clock::now();
  const int64_t room = bounded ? options.max_new_tokens
                               : std::min(options.max_new_tokens, config.max_positions - total);
  if (!ws.fixed_capacity()) ws.cache().ensure_room(static_cast<int64_t>(new_tokens.size()) + room);
  // Decode-time retrieval (LouisKV, Quest): attention of decode tokens is served from a pool built
  // over the working set; every token still lands in the working set, which stays exact.
  RetrievalPolicy* const retrieval = policy.decode_retrieval();
  std::unique_ptr<RetrievalKvSource> retrieving;
  std::unique_ptr<PromptUnitsBesidePrefill> beside;
  at::Tensor logits;
  if (retrieval && retrieval->settings().prompt_by_decode && ws.tokens() > 0 &&
      ws.next_position() + static_cast<int64_t>(new_tokens.size()) <= config.max_positions) {
    // Quest's long-input method: the new prompt is fed token by token through retrieval.
    retrieving = std::make_unique<RetrievalKvSource>(
        *retrieval, ws.cache(), static_cast<int64_t>(new_tokens.size()) + room, &ws.cache());
    if (trace) retrieving->record_map(request);
    for (size_t i = 0; i < new_tokens.size(); ++i) {
      if (ws.fixed_capacity() && ws.tokens() + 1 > ws.cache().capacity())
        throw std::out_of_range("the prompt does not fit the working set beside its budget");
      logits = forward_block(decoder, policy, ws, {new_tokens[i]}, ForwardPhase::kDecode, 0,
                             timeline, trace.get(), retrieving.get())
                   .view({-1});
    }
  } else {
    // The prompt's units (and the offload's copies) layer by layer beside the prefill, when the
    // prefill leaves the working set as it is.
    if (retrieval && retrieval->settings().overlap_prefill && !bounded && room > 1)
      beside = std::make_unique<PromptUnitsBesidePrefill>(*retrieval, ws.cache(),
                                                          offloads(retrieval->settings(), decoder));
    FinalLayerFn on_final_layer;
    if (beside)
      on_final_layer = [&](int64_t layer, const at::Tensor& keys) {
        beside->layer_ready(layer, keys);
      };
    logits = prefill(decoder, policy, ws, new_tokens, options.prefill_chunk, timeline, trace.get(),
                     options.evict_when_full ? room : -1, on_final_layer,
                     {options.on_prefill_progress, options.cancel});
  }
  // Cancelled between two prefill blocks: no token; the blocks done stay in the working set.
  const bool prefill_cancelled = !logits.defined();
  // Batch-1 decode on CUDA replays one recorded step per token (static_decode_step.h) over the
  // working set's fixed slots, whatever the policy keeps there, and with decode-time retrieval
  // whose policy decides on the device (the source attached to the step); a traced request or a
  // policy that watches decode layers keeps the per-layer path.
  std::unique_ptr<StaticDecodeStep> own_step;
  StaticDecodeStep* static_step = nullptr;
  if (!prefill_cancelled && decoder.device().is_cuda() && options.recorded_step && !trace &&
      (!retrieval || retrieval->decides_on_device()) &&
      !policy.wants_layers(ForwardPhase::kDecode)) {
    std::unique_ptr<StaticDecodeStep>& slot = options.kept_step ? *options.kept_step : own_step;
    if (slot && &slot->decoder() == &decoder) {
      slot->bind(ws.cache());
      slot->attach(nullptr);  // a source of an earlier request is gone
    } else {
      slot = std::make_unique<StaticDecodeStep>(decoder, ws.cache());
    }
    static_step = slot.get();
  }
  // The kept step must not point at this request's source once it is gone, however this ends.
  struct Detach {
    StaticDecodeStep* step;
    ~Detach() {
      if (step) step->attach(nullptr);
    }
  } detach{static_step};
  bool recorded_retrieval = false;
  const SamplingOptions& sampling = sampler.options();
  // The recorded step's argmax chooses among the sampler's vocabulary (a tokenizer smaller than
  // the embedding limits it): one kernel inside the step, no argmax launched after it.
  const bool greedy = sampling.temperature == 0.0 && sampling.repetition_penalty == 1.0;
  if (static_step && greedy) static_step->set_greedy_vocab(sampling.vocab_limit);
  bool next_is_argmax = false;  // the static step already holds the greedy choice
  Clock::time_point decode_start;
  result.stop_reason = "length";
  for (int64_t step = 0; step < room; ++step) {
    if (prefill_cancelled || (options.cancel && options.cancel->load())) {
      result.stop_reason = "cancelled";
      break;
    }
    // Either way one id or the logits cross to the host: a sync point.
    if (options.on_logits) options.on_logits(logits);
    const bool forced =
        options.forced_tokens && step < static_cast<int64_t>(options.forced_tokens->size());
    const int64_t token = forced           ? (*options.forced_tokens)[step]
                          : next_is_argmax ? static_step->greedy_token()
                                           : sampler.next(logits, all);
    if (step == 0) {
      result.prefill_ms = ms_since(t0);
      result.time_to_first_token_ms = result.prefill_ms;
      decode_start = Clock::now();
    }
    result.tokens.push_back(token);
    all.push_back(token);
    if (options.stop_at_eos && config.is_eos(token)) {
      result.stop_reason = "eos";
      break;
    }
    if (on_token && !on_token(token)) {
      result.stop_reason = "stop";
      break;
    }
    if (step + 1 == room) break;  // the last token needs no forward pass
    if (trace) trace->set_phase("decode", step + 1);
    if (retrieval) {
      // The prefill policy shrinks the working set only when it is full: a plan re-rotates its
      // slots, so the pool is rebuilt from it (once a block of reply tokens, not every 16).
      const bool full = ws.fixed_capacity() && ws.tokens() + 1 > ws.cache().capacity();
      if (full && !shrink_to(policy, ws, decoder, ws.cache().capacity() - policy.decode_slack(),
                             trace.get())) {
        throw std::logic_error("decode: the working set is full and the policy keeps it");
      }
      if (!retrieving || full) {
        if (static_step) static_step->attach(nullptr);
        if (retrieving) result.retrieval.add(retrieving->stats());
        // What was made beside the prefill serves the first source only (a plan since changes
        // the slots).
        PromptUnitsBesidePrefill::Built built;
        if (beside) {
          built = beside->finish();
          beside.reset();
          if (full || built.tokens != ws.tokens()) built = {};
        }
        // offload: the retrieval layers' copy to host memory runs on a side stream beside the
        // source's build (which reads them), unless it ran beside the prefill; once built,
        // attention reads those layers from the source and the working set only receives each
        // new token there.
        std::optional<gpu::StreamFork> staging;
        if (offloads(retrieval->settings(), decoder) && !built.staged) {
          const std::vector<int64_t> moved =
              retrieval_layer_ids(retrieval->settings(), config.num_layers);
          staging.emplace(decoder.device());
          staging->run([&] { ws.cache().stage_layers_to_host(moved); });
        }
        retrieving = std::make_unique<RetrievalKvSource>(*retrieval, ws.cache(), room - step - 1,
                                                         &ws.cache(), &built.units);
        if (trace) retrieving->record_map(request);
        if (staging) staging->join();
        if (staging || built.staged) ws.cache().use_staged_layers();
        retrieving->note_beside_prefill(built.worker_ms, built.wait_ms);
      }
      // More units than the recorded selection sorts: the per-layer path from here on (the
      // source's state is the same either way).
      recorded_retrieval = static_step && retrieving->recordable();
      if (static_step) static_step->attach(recorded_retrieval ? retrieving.get() : nullptr);
    } else if (const auto plan = policy.before_decode_step(ws.info())) {
      apply_plan(*plan, ws, decoder, trace.get());
    }
    if (ws.next_position() + 1 > config.max_positions &&
        !shrink_to(policy, ws, decoder, config.max_positions - 1, trace.get())) {
      throw std::out_of_range(
          positions_error(static_cast<int64_t>(all.size()), config.max_positions, policy));
    }
    if (!ws.fixed_capacity()) ws.cache().ensure_room(1);
    // Decode's device memory from here on (the prefill's activations and a retrieval source's
    // build are behind it).
    if (step == 0 && options.measure_decode_memory) {
      result.decode_start_device_bytes = gpu::allocated_bytes(decoder.device());
      gpu::reset_peak_allocated(decoder.device());
    }
    if (static_step && (!retrieval || recorded_retrieval)) {
      logits = static_step->step(token, ws.next_position());
      ws.appended(1);
      next_is_argmax = greedy && !options.on_logits;
      continue;
    }
    next_is_argmax = false;
    logits = forward_block(decoder, policy, ws, {token}, ForwardPhase::kDecode, step + 1, timeline,
                           trace.get(), retrieving.get())
                 .view({-1});
  }
  if (!result.tokens.empty()) {
    result.decode_ms = ms_since(decode_start);
    const auto decoded = static_cast<double>(result.tokens.size() - 1);
    result.decode_tokens_per_s = decoded > 0 ? 1000.0 * decoded / result.decode_ms : 0;
  }
  if (retrieving) result.retrieval.add(retrieving->stats());
  if (result.tokens.size() > 1 && options.measure_decode_memory)
    result.decode_peak_device_bytes = gpu::peak_allocated_bytes(decoder.device());
  result.evicted_tokens = ws.evicted_tokens() - evicted_before;
  result.peak_kv_tokens = ws.peak_tokens();
  policy.end_request(ws.info());
  if (trace) trace->flush();
  if (retrieving && retrieving->map() && options.observer)
    options.observer->on_retrieval_map(*retrieving->map());
  if (options.observer) {
    RequestSummary summary;
    summary.request = request;
    summary.prompt_tokens = result.prompt_tokens;
    summary.generated_tokens = static_cast<int64_t>(result.tokens.size());
    summary.time_to_first_token_ms = result.time_to_first_token_ms;
    summary.decode_tokens_per_s = result.decode_tokens_per_s;
    options.observer->on_request_finished(summary);
  }
  return result;
}

at::Tensor prefill(const Decoder& decoder, KvCache& cache, const std::vector<int64_t>& tokens,
                   int64_t chunk, gpu::DeviceTimeline& timeline, TraceRecorder* trace) {
  FullPolicy full;
  KvWorkingSet ws(cache, decoder.config().max_positions);
  return prefill(decoder, full, ws, tokens, chunk, timeline, trace);
}

GenerationResult generate(const Decoder& decoder, KvCache& cache,
                          const std::vector<int64_t>& history,
                          const std::vector<int64_t>& new_tokens, const GenerationOptions& options,
                          const TokenFn& on_token) {
  if (cache.lengths()[0] != static_cast<int64_t>(history.size())) {
    throw std::logic_error("generate: the cache does not hold exactly the history");
  }
  FullPolicy full;
  KvWorkingSet ws(cache, decoder.config().max_positions);
  return generate(decoder, full, ws, history, new_tokens, options, on_token);
}

}  // namespace engram
