// Several generation states decoded together: their KV rows in one ragged KvCache (rows of
// different lengths; empty slots carry position -1 and are masked), one forward per step for
// every row, each row at its own next position.
//
// The rows are fixed slots: a member keeps its row while it stays, a member that leaves frees its
// row (a finished one drops its KV, an unfinished one gets its row back as its own one-row cache),
// and one that joins is copied into a free row. So the batch's storage changes only when it needs
// more rows or more capacity, and on CUDA the step is the recorded graph of
// core/runtime/static_decode_step.h, replayed frame after frame (OxyGen's language requests come
// and go every frame). A row whose member is done, or that is free, is computed as filler and
// keeps its length.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/engine/generation_state.h"

namespace engram {

class StaticDecodeStep;

class BatchedStates {
 public:
  BatchedStates();
  // Takes the KV of every state (each on the decoder's device, location kDevice). `reserve`:
  // decode steps of room in every row (at least; each member's remaining token limit is kept).
  BatchedStates(std::vector<std::shared_ptr<GenerationState>> states, int64_t reserve);
  BatchedStates(BatchedStates&&) noexcept;
  BatchedStates& operator=(BatchedStates&&) noexcept;
  ~BatchedStates();

  // kOnCuda (default): the recorded step on CUDA, the per-layer path elsewhere; kAlways: the
  // recorded step's code on any device (on the CPU it runs directly: tests); kNever: per-layer.
  enum class RecordedStep : uint8_t { kOnCuda, kAlways, kNever };
  void set_recorded_step(RecordedStep use) { recorded_ = use; }
  static bool records(RecordedStep use, at::Device device) {
    return use == RecordedStep::kAlways || (use == RecordedStep::kOnCuda && device.is_cuda());
  }

  // One decode step for every row that is not done: choose each row's next token from its
  // logits, feed them all in one forward. Returns the tokens chosen (rows finished by their
  // choice count; they are not fed further).
  int64_t step(const Decoder& decoder, gpu::DeviceTimeline& timeline, TraceRecorder* trace);

  // Gives every member its row back (location kDevice) and empties the batch.
  void unbatch();
  // The batch becomes `wanted` (members not done): members that stay keep their rows, others
  // join into free rows from their own KV; members left out get their KV back (kept) or dropped
  // (done).
  void rebatch(std::vector<std::shared_ptr<GenerationState>> wanted, int64_t reserve);

  // New requests that continue row `prefix_row` of `prefix` (a frame's shared observation), each
  // with its own suffix: their suffixes are prefilled in one forward over rows of their own, each
  // a copy of the prefix (shorter suffixes padded with filler tokens after their ends, cut off
  // after the forward: causal attention keeps the real tokens exact); each row then moves into a
  // free row of the batch. They are members from now on, with their first logits.
  struct Spawn {
    std::shared_ptr<GenerationState> state;
    std::vector<int64_t> suffix;
  };
  void spawn(const Decoder& decoder, const KvCache& prefix, int64_t prefix_row,
             const std::vector<Spawn>& requests, int64_t reserve, gpu::DeviceTimeline& timeline);

  // The members, in row order.
  std::vector<std::shared_ptr<GenerationState>> members() const;
  int64_t rows() const;  // members
  int64_t active_rows() const;
  bool empty() const { return rows() == 0; }
  const KvCache* kv() const { return kv_.get(); }  // kv()->batch() >= rows(): free rows
  // How many times the recorded step was recorded (0 off CUDA).
  int64_t recordings() const;

 private:
  void leave(int64_t row);
  // Room for `members` members in total (`joining` of them new) with `need` slots in every row:
  // more rows (a new cache, the rows that stay copied over) or more capacity.
  void make_room(int64_t members, int64_t joining, int64_t need, const KvCache& like);
  int64_t free_row() const;

  std::vector<std::shared_ptr<GenerationState>> slots_;  // per row of kv_; null = free
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<StaticDecodeStep> recorded_step_;
  RecordedStep recorded_ = RecordedStep::kOnCuda;
};

}  // namespace engram
