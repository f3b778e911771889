#include "core/engine/generator.h"

#include <chrono>
#include <memory>
#include <stdexcept>

#include "core/kv/cache_kv_source.h"
#include "core/runtime/static_decode_step.h"
#include "core/trace/trace_recorder.h"
#include "gpu/device_timeline.h"

namespace engram {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

int64_t next_request_id() {
  static std::atomic<int64_t> next{1};
  return next++;
}

at::Tensor prefill(const Decoder& decoder, KvCache& cache, const std::vector<int64_t>& tokens,
                   int64_t chunk, gpu::DeviceTimeline& timeline, TraceRecorder* trace) {
  if (tokens.empty()) throw std::invalid_argument("prefill: no tokens");
  CacheKvSource source(cache);
  cache.ensure_room(static_cast<int64_t>(tokens.size()));
  at::Tensor logits;
  const int64_t n = static_cast<int64_t>(tokens.size());
  chunk = chunk > 0 ? chunk : n;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t len = std::min(chunk, n - begin);
    ForwardRequest req;
    req.tokens = {std::vector<int64_t>(tokens.begin() + begin, tokens.begin() + begin + len)};
    const int64_t start_pos = cache.lengths()[0];
    req.positions = {std::vector<int64_t>(len)};
    for (int64_t i = 0; i < len; ++i)
      req.positions[0][i] = start_pos + i;
    logits = decoder.forward(req, source, timeline, trace).logits;
  }
  return logits.view({-1});
}

GenerationResult generate(const Decoder& decoder, KvCache& cache,
                          const std::vector<int64_t>& history,
                          const std::vector<int64_t>& new_tokens, const GenerationOptions& options,
                          const TokenFn& on_token) {
  const ModelConfig& config = decoder.config();
  const int64_t total = static_cast<int64_t>(history.size() + new_tokens.size());
  if (total + 1 > config.max_positions) {
    throw std::out_of_range("the prompt has " + std::to_string(total) +
                            " tokens; the model's maximum is " +
                            std::to_string(config.max_positions) + " positions");
  }
  if (cache.lengths()[0] != static_cast<int64_t>(history.size())) {
    throw std::logic_error("generate: the cache does not hold exactly the history");
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

  const auto t0 = Clock::now();
  const int64_t room = std::min(options.max_new_tokens, config.max_positions - total);
  cache.ensure_room(static_cast<int64_t>(new_tokens.size()) + room);
  at::Tensor logits =
      prefill(decoder, cache, new_tokens, options.prefill_chunk, timeline, trace.get());
  CacheKvSource source(cache);
  // Batch-1 decode on CUDA replays one recorded step per token (static_decode_step.h); a traced
  // request keeps the per-layer path so that its layer timeline is exact.
  std::unique_ptr<StaticDecodeStep> static_step;
  if (decoder.device().is_cuda() && cache.batch() == 1 && !trace) {
    static_step = std::make_unique<StaticDecodeStep>(decoder, cache);
  }
  const SamplingOptions& sampling = sampler.options();
  // The recorded step's argmax spans every row of the logits; a vocab limit needs the sampler.
  const bool greedy = sampling.temperature == 0.0 && sampling.repetition_penalty == 1.0 &&
                      (sampling.vocab_limit <= 0 || sampling.vocab_limit >= config.vocab_size);
  bool next_is_argmax = false;  // the static step already holds the greedy choice
  Clock::time_point decode_start;
  result.stop_reason = "length";
  for (int64_t step = 0; step < room; ++step) {
    if (options.cancel && options.cancel->load()) {
      result.stop_reason = "cancelled";
      break;
    }
    // Either way one id or the logits cross to the host: a sync point.
    const int64_t token = next_is_argmax ? static_step->greedy_token() : sampler.next(logits, all);
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
    if (static_step) {
      logits = static_step->step(token, cache.lengths()[0]);
      next_is_argmax = greedy;
      continue;
    }
    ForwardRequest req;
    req.tokens = {{token}};
    req.positions = {{cache.lengths()[0]}};
    logits = decoder.forward(req, source, timeline, trace.get()).logits.view({-1});
  }
  if (!result.tokens.empty()) {
    result.decode_ms = ms_since(decode_start);
    const auto decoded = static_cast<double>(result.tokens.size() - 1);
    result.decode_tokens_per_s = decoded > 0 ? 1000.0 * decoded / result.decode_ms : 0;
  }
  if (trace) trace->flush();
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

}  // namespace engram
