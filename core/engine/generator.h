// Generation over a KvCache: chunked prefill of the new tokens, then token-by-token decode with
// sampling until EOS, a stop, the token limit or cancellation. Each call is one request: its
// compute (and copy) intervals go to the observer as a layer timeline.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/kv/retrieval_kv_source.h"
#include "core/kv/working_set.h"
#include "core/policies/memory_policy.h"
#include "core/runtime/decoder.h"
#include "core/runtime/sampler.h"
#include "core/trace/engine_observer.h"

namespace engram {

class StaticDecodeStep;  // core/runtime/static_decode_step.h

// A prefill's progress, after each block: `done` of the `total` tokens it was given are in the
// working set (a long history's block prefill under a budget takes seconds, on a CPU minutes).
using PrefillProgressFn = std::function<void(int64_t done, int64_t total)>;

struct GenerationOptions {
  int64_t max_new_tokens = 128;
  SamplingOptions sampling;
  bool stop_at_eos = true;
  int64_t prefill_chunk = 512;  // bounds attention scratch memory on long prompts
  // A fixed working set (budget + one block) evicts during the prefill only when the next block,
  // the policy's scoring patch and (after the last block) the reply's max_new_tokens would not
  // fit: the patch-scored shrink to the budget then runs once for many short prompts instead of
  // after every block past the budget (the paper's block prefill, kept when false). Attention
  // sees at most the working set's capacity either way. A chat session's turns: each turn's
  // catch-up would otherwise forward the patch and re-plan every slot.
  bool evict_when_full = false;
  EngineObserver* observer = nullptr;
  bool trace = false;  // record layer intervals (sent to the observer)
  // Fill GenerationResult::decode_*_device_bytes: resets the CUDA allocator's peak at the first
  // decode step, so not while someone else measures a peak across requests (bench epicache).
  bool measure_decode_memory = false;
  bool recorded_step = true;  // CUDA: decode through the recorded graph step when the policy can
  // CUDA: the recorded step kept across requests by the caller (a chat session's working set keeps
  // its addresses from reply to reply, so the step is recorded once, not once per reply). Null:
  // one step per request. Created here when empty, re-bound to the request's cache otherwise.
  std::unique_ptr<StaticDecodeStep>* kept_step = nullptr;
  // Teacher forcing (fidelity evaluations): the runner feeds these tokens instead of sampling and
  // hands every step's logits [vocab] to on_logits before it (one per generated token).
  const std::vector<int64_t>* forced_tokens = nullptr;
  std::function<void(const at::Tensor&)> on_logits;
  // Checked before each prefill block and each decode step: a request cancelled in its prefill
  // returns no tokens and leaves the blocks it did in the working set (a prefix of the prompt).
  const std::atomic<bool>* cancel = nullptr;
  PrefillProgressFn on_prefill_progress;
};

struct GenerationResult {
  std::vector<int64_t> tokens;  // generated ids (a final EOS included when it stopped there)
  std::string stop_reason;      // "eos", "length", "stop", "cancelled"
  int64_t prompt_tokens = 0;    // tokens prefilled by this request
  double prefill_ms = 0;
  double time_to_first_token_ms = 0;
  double decode_ms = 0;
  double decode_tokens_per_s = 0;
  int64_t evicted_tokens = 0;  // slots the policy dropped from attention during this request
  int64_t peak_kv_tokens = 0;  // the most KV slots per layer attention saw
  RetrievalStats retrieval;    // decode-time retrieval (policies with decode_retrieval())
  // With GenerationOptions::measure_decode_memory on CUDA (else -1): the most bytes of live
  // device tensors while decoding (caching allocator, weights included; from the first decode
  // step, after a retrieval source's build), and the bytes live at that step (steady state).
  int64_t decode_peak_device_bytes = -1;
  int64_t decode_start_device_bytes = -1;
};

// Returns false to stop generation after this token (a stop string matched).
using TokenFn = std::function<bool(int64_t token)>;

// Next request id in this process (trace request numbers).
int64_t next_request_id();

// Appends `new_tokens` to the working set under `policy` and generates: prefill in blocks of
// options.prefill_chunk, after each block the policy shrinks the working set to its budget (peak
// KV per layer <= budget + block, + |patch| for a policy that scores with a patched prompt: the
// patch is forwarded after the block and dropped before the shrink); before each decode step it
// may shrink again. `history` is the
// stream already fed (the repetition penalty reads it). Throws std::out_of_range when the policy
// keeps every token and the prompt passes the model's positions.
GenerationResult generate(const Decoder& decoder, MemoryPolicy& policy, KvWorkingSet& working_set,
                          const std::vector<int64_t>& history,
                          const std::vector<int64_t>& new_tokens, const GenerationOptions& options,
                          const TokenFn& on_token);

// Prefills `tokens` into the working set in blocks under `policy` and returns the last position's
// logits [vocab] (f32). `reserve_when_full` >= 0 (a fixed working set only): evict only when
// full, keeping room for that many tokens after the last block (GenerationOptions::
// evict_when_full); -1: shrink to the budget after every block past it. `on_final_layer` (may be
// empty): called during the last block once a layer's KV is written, with the layer and its keys
// [H, n, d] over the working set's n slots after the block (they are final when the policy keeps
// every token).
// `control`: progress after each block, and a cancel flag read before each block; a cancelled
// prefill returns an undefined tensor and leaves the blocks it did in the working set.
using FinalLayerFn = std::function<void(int64_t layer, const at::Tensor& keys)>;
struct PrefillControl {
  PrefillProgressFn on_progress;
  const std::atomic<bool>* cancel = nullptr;
};
at::Tensor prefill(const Decoder& decoder, MemoryPolicy& policy, KvWorkingSet& working_set,
                   const std::vector<int64_t>& tokens, int64_t chunk, gpu::DeviceTimeline& timeline,
                   TraceRecorder* trace, int64_t reserve_when_full = -1,
                   const FinalLayerFn& on_final_layer = {}, const PrefillControl& control = {});

// Shrinks a working set past its budget to the budget as a full one is before the next block: the
// policy's patch (if any) scores every slot, then its plan keeps the budget. Nothing when it holds
// the budget or less.
void evict_to_budget(const Decoder& decoder, MemoryPolicy& policy, KvWorkingSet& working_set,
                     gpu::DeviceTimeline& timeline, TraceRecorder* trace);

// The most tokens one forward of prefill() takes into `working_set` under `policy` with chunks of
// `chunk`: a fixed working set holds the budget, one block and the policy's patch, so it takes
// the block less the patch (a caller feeding whole blocks would have each cut in two, the second
// part a forward and an eviction of its own). At least 1.
int64_t prefill_room(const MemoryPolicy& policy, const KvWorkingSet& working_set, int64_t chunk);

// Full KV over a plain cache (the behaviour before policies): appends `new_tokens` (row 0) to
// `cache` and generates. `history` is everything already in the
// cache (for the repetition penalty and positions); new tokens sit at positions after it.
GenerationResult generate(const Decoder& decoder, KvCache& cache,
                          const std::vector<int64_t>& history,
                          const std::vector<int64_t>& new_tokens, const GenerationOptions& options,
                          const TokenFn& on_token);

// Prefills `tokens` into row 0 of `cache` in chunks and returns the last position's logits
// [vocab] (f32). Used by generate() and by benchmarks.
at::Tensor prefill(const Decoder& decoder, KvCache& cache, const std::vector<int64_t>& tokens,
                   int64_t chunk, gpu::DeviceTimeline& timeline, TraceRecorder* trace);

}  // namespace engram
