// One decode step (one token for every row of a cache) whose device work has fixed shapes and
// fixed addresses, so that it is recorded once (a CUDA graph on CUDA, gpu/cuda_graph.h) and
// replayed at every token: the per-layer path costs ~40 torch ops × ~12 µs of host time per layer,
// which made 7B decode host-bound at a third of the HBM roofline
// (bench/results/2026-11-23-h100-issue3).
//
// What makes it replayable: each row's token id, RoPE position and write slot live in a device
// buffer updated in place; attention runs over the cache's whole preallocated capacity, with slots
// whose position is -1, later than the query or outside the sliding window masked (and, per KV
// head, those a ragged working set marks invalid: KvCache::key_valid); KV is
// written at the device slot; logits and their argmax land in static buffers. The step is
// re-recorded when the cache's capacity (and so its storage) or its validity mask changes, or
// when it is bound to another cache (bind()).
//
// Several rows (OxyGen's batched language requests, core/engine/batched_decode.h): every row is
// computed at every step, each at its own length and position; a row that is not advanced (a
// finished request, a free row of the batch) writes a scratch slot just past its length that the
// next step overwrites, so its length and its stored KV stay as they were.
//
// It runs the same layer code as Decoder::forward (core/runtime/decoder_layer.h); only attention
// differs (fused RoPE + KV write at the device slot, gpu::decode_attention over the capacity).
// Layer timelines and attention probes need the per-layer path and are not offered here.
//
// Decode-time retrieval (LouisKV, Quest; attach()): the cache is the conversation's working set
// (every token still lands there) and the source's retrieval layers attend to their device region
// instead, deciding, selecting and gathering inside the recording
// (RetrievalKvSource::recorded_layer); the source's host work runs around each replay.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/runtime/decoder.h"
#include "gpu/cuda_graph.h"

namespace engram {

class RetrievalKvSource;  // core/kv/retrieval_kv_source.h

// Slots to allocate for a cache that a recorded step will serve: `slots` with a quarter more,
// rounded up to 256 (every new capacity is a new recording, which costs tens to hundreds of
// milliseconds on a 7B model on CUDA; the per-layer path reads only the filled slots).
int64_t recorded_capacity(int64_t slots);

class StaticDecodeStep {
 public:
  // `cache` must have the decoder's device and dtype; both must outlive the step (or the next
  // bind()).
  StaticDecodeStep(const Decoder& decoder, KvCache& cache);

  // Steps over `cache` from now on (recorded again at the next step when its storage differs).
  void bind(KvCache& cache);
  KvCache& cache() const { return *cache_; }
  // Serves the retrieval layers of `source` (built over the bound cache, which it mirrors into;
  // source->recordable()) from now on; nullptr: plain decode again. One-row caches only. The
  // source must outlive its use; attach(nullptr) before it goes.
  void attach(RetrievalKvSource* source);
  const Decoder& decoder() const { return decoder_; }

  // Runs `token` at RoPE position `position`, writing its KV at the row's current length and
  // committing it to the cache (growing the cache, and re-recording, when it is full). Returns
  // the logits, f32 [vocab]: a static buffer that the next step overwrites. Throws
  // std::out_of_range for a token outside the vocabulary or a position past the model's maximum.
  // One-row caches only.
  const at::Tensor& step(int64_t token, int64_t position);

  // One token for every row: row b takes tokens[b] at RoPE position positions[b], written at the
  // row's current length; rows with advance[b] false are computed but keep their length (their
  // logits are meaningless). Returns the logits, f32 [rows, vocab] (a static buffer).
  const at::Tensor& step_rows(const std::vector<int64_t>& tokens,
                              const std::vector<int64_t>& positions,
                              const std::vector<bool>& advance);

  // The argmax of the last step's logits, row 0 / every row (ids cross to the host: a sync),
  // over the first greedy_vocab() ids of each row.
  int64_t greedy_token() const;
  std::vector<int64_t> greedy_tokens() const;
  const at::Tensor& logits() const { return logits_; }
  // The ids the recorded argmax chooses among: the first `limit` (a tokenizer smaller than the
  // model's embedding: its sampler's vocab limit), or all of them (limit <= 0 or past the
  // vocabulary). A change records the step again at the next step.
  void set_greedy_vocab(int64_t limit);
  int64_t greedy_vocab() const { return greedy_vocab_; }
  // How many times the step has been recorded (1 + the number of capacity changes seen).
  int64_t recordings() const { return recordings_; }

 private:
  // A recording and what it read. With a retrieval source there are two: the full step, and a
  // lean one for steps the host knows retrieve at no layer (RetrievalKvSource::idle_step(): a
  // fixed stride's off steps), without scoring, selection and gather.
  struct Recording {
    explicit Recording(at::Device device) : graph(device) {}
    gpu::DeviceGraph graph;
    int64_t capacity = -1;
    const void* storage = nullptr;
    int64_t storage_version = -1;  // KvCache::storage_version() (layers moved to the host)
    const void* valid = nullptr;
    // Every tensor the recording reads in place (per layer K, V, validity; the positions): a
    // cache bound later is replayed over only when it sits at exactly these addresses.
    std::vector<const void*> addresses;
    const RetrievalKvSource* retrieval = nullptr;
    int64_t retrieval_version = -1;
    int64_t greedy_vocab = -1;
  };
  // Records the step into `r`; returns whether that already ran it (the capture's warm-up on
  // CUDA).
  bool record(Recording& r);
  void run();

  const Decoder& decoder_;
  KvCache* cache_ = nullptr;
  std::array<Recording, 2> recorded_;  // [0] the full step, [1] the lean one
  at::Tensor inputs_;                  // int64 [3, rows] on the device: tokens, positions, slots
  at::Tensor logits_;                  // f32 [rows, vocab]
  at::Tensor row0_logits_;             // logits_[0] (step() returns it)
  at::Tensor next_id_;                 // int64 [rows] argmax of logits_
  // Full-capacity views of the cache, as recorded.
  std::vector<at::Tensor> keys_;       // per layer [rows, kv_heads, capacity, head_dim]
  std::vector<at::Tensor> values_;     // per layer [rows, kv_heads, capacity, head_dim]
  at::Tensor key_positions_;           // [rows, capacity] int64
  std::vector<at::Tensor> key_valid_;  // per layer [rows, kv_heads, capacity] bool, or undefined
  int64_t recorded_rows_ = -1;
  int64_t greedy_vocab_ = 0;  // set in the constructor: the model's vocabulary
  std::vector<const void*> addresses(const KvCache& cache) const;
  int64_t recordings_ = 0;
  RetrievalKvSource* retrieval_ = nullptr;
};

}  // namespace engram
