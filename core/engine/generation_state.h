// One in-flight generation request as OxyGen keeps it (DESIGN.md, "OxyGen"): its KV, the tokens it
// generated, the logits of its last position and whether it is done. The state holds everything
// needed to continue decoding, so a request can stop at any step (a frame boundary, the action
// needing the device), be stored in host memory, come back and go on with the same tokens as if
// it had never stopped, without recomputing anything.
//
// Where the KV lives: in the state's own one-row cache on the device, in a one-row cache in host
// memory (store_to_host), or in a row of a BatchedStates (batch()); unbatch() gives it back.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/model/model_config.h"

namespace engram {

class Decoder;
namespace gpu {
class DeviceTimeline;
}
class TraceRecorder;
class StaticDecodeStep;

class GenerationState;
// True to end the request after its newest token (a stop string, the end of a line).
using StopCheck = std::function<bool(const GenerationState& state)>;

struct GenerationLimits {
  int64_t max_new_tokens = 32;
  bool stop_at_eos = true;
  // Greedy choice among ids below this (0 = every row of the logits), as SamplingOptions.
  int64_t vocab_limit = 0;
  StopCheck stop;  // may be empty
};

enum class StateLocation : uint8_t { kDevice, kHost, kBatched, kReleased };

class GenerationState {
 public:
  GenerationState(int64_t id, std::string task, GenerationLimits limits);

  // Prefills `tokens` after whatever the state's KV holds (one forward, one row) and keeps the
  // last position's logits. `kv` becomes the state's cache; it must be a one-row cache on the
  // decoder's device with room for the tokens (it grows otherwise).
  void prefill(const Decoder& decoder, std::unique_ptr<KvCache> kv,
               const std::vector<int64_t>& tokens, gpu::DeviceTimeline& timeline,
               TraceRecorder* trace);

  // Greedy token from the last logits, appended to tokens(); sets done() on EOS, the token limit
  // or the stop check. Returns the token. Used by the batched step and by decode_alone().
  int64_t choose_next(const ModelConfig& config);
  // The bookkeeping of choose_next for a token chosen elsewhere (one argmax over a batch).
  void accept_token(int64_t token, const ModelConfig& config);
  // The logits of the position just fed ([vocab] f32), from a batched or single step.
  void set_last_logits(at::Tensor logits) { last_logits_ = std::move(logits); }

  // Decodes up to `steps` tokens alone (batch 1); returns how many were chosen. With `recorded`
  // (CUDA, no trace) each token replays that recorded step, bound to this state's cache.
  int64_t decode_alone(const Decoder& decoder, int64_t steps, gpu::DeviceTimeline& timeline,
                       TraceRecorder* trace, StaticDecodeStep* recorded = nullptr);

  // Moves the KV (and logits) to host memory / back to `device`. No-ops where they already are.
  void store_to_host();
  void load_to_device(at::Device device);
  // Drops the KV (a finished request that nobody continues).
  void release_kv();

  int64_t id() const { return id_; }
  const std::string& task() const { return task_; }
  const GenerationLimits& limits() const { return limits_; }
  const std::vector<int64_t>& tokens() const { return tokens_; }
  bool done() const { return done_; }
  const std::string& stop_reason() const { return stop_reason_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  // Position of the next token fed (= tokens in the KV, counted even while batched).
  int64_t next_position() const { return kv_length_; }
  StateLocation location() const { return location_; }
  KvCache* kv() { return kv_.get(); }
  const at::Tensor& last_logits() const { return last_logits_; }

  // The batch moves the KV in and out (batched_decode.cpp).
  std::unique_ptr<KvCache> take_kv(StateLocation now);
  void put_kv(std::unique_ptr<KvCache> kv);
  void fed_one() { ++kv_length_; }
  // Its prompt was prefilled in a batch row (BatchedStates::spawn): `length` tokens of KV there.
  void prefilled_in_batch(int64_t length, at::Tensor logits);
  void set_prompt_tokens(int64_t n) { prompt_tokens_ = n; }

 private:
  int64_t id_;
  std::string task_;
  GenerationLimits limits_;
  std::unique_ptr<KvCache> kv_;
  StateLocation location_ = StateLocation::kReleased;
  int64_t kv_length_ = 0;
  int64_t prompt_tokens_ = 0;
  std::vector<int64_t> tokens_;
  at::Tensor last_logits_;
  bool done_ = false;
  std::string stop_reason_;
};

struct KvRowRef {
  const KvCache* cache;
  int64_t row;
};
// The rows' filled slots (position >= 0, in slot order) gathered into one cache on `device`, row i
// from rows[i], shorter rows padded with empty slots (position -1, zero KV), with room for
// `reserve` more tokens in every row. Slots are not positions: a padded row goes on at its own
// next position (masking is by position), and the next gather drops its padding again.
std::unique_ptr<KvCache> gather_kv_rows(const std::vector<KvRowRef>& rows, int64_t reserve,
                                        at::Device device);
// Row `row` of `source` as a one-row cache on `device` (how a request starts from a frame's
// shared prefill, and how a batched request gets its own KV back).
std::unique_ptr<KvCache> copy_kv_row(const KvCache& source, int64_t row, int64_t reserve,
                                     at::Device device);

}  // namespace engram
