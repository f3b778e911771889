// Several generation states decoded together: their KV rows stacked into one ragged KvCache (rows
// of different lengths; empty slots carry position -1 and are masked), one forward per step for
// every row, each row at its own next position. A row that finishes stays in the batch (its
// input is ignored) until the next rebatch(), so a step never reshapes the cache.
//
// batch() takes the members' KV into the batch, unbatch() gives every member its row back as its
// own one-row cache; rebatch() is the frame loop's membership change: rows of members that stay
// are copied once into the new cache, finished members leave (their KV is dropped), new members
// join from their own caches.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/engine/generation_state.h"

namespace engram {

class BatchedStates {
 public:
  BatchedStates() = default;
  // Takes the KV of every state (each on the decoder's device, location kDevice). `reserve`:
  // decode steps of room in every row before the cache grows.
  BatchedStates(std::vector<std::shared_ptr<GenerationState>> states, int64_t reserve);
  BatchedStates(BatchedStates&&) = default;
  BatchedStates& operator=(BatchedStates&&) = default;
  ~BatchedStates();

  // One decode step for every row that is not done: choose each row's next token from its
  // logits, feed them all in one forward. Returns the tokens chosen (rows finished by their
  // choice count; they are not fed further).
  int64_t step(const Decoder& decoder, gpu::DeviceTimeline& timeline, TraceRecorder* trace);

  // Gives every member its row back (location kDevice) and empties the batch.
  void unbatch();
  // The batch becomes `wanted` (members not done): rows already here are copied, others join
  // from their own KV; members left out get their KV back (kept) or dropped (done).
  void rebatch(std::vector<std::shared_ptr<GenerationState>> wanted, int64_t reserve);

  const std::vector<std::shared_ptr<GenerationState>>& members() const { return members_; }
  int64_t rows() const { return static_cast<int64_t>(members_.size()); }
  int64_t active_rows() const;
  bool empty() const { return members_.empty(); }
  const KvCache* kv() const { return kv_.get(); }

 private:
  std::vector<std::shared_ptr<GenerationState>> members_;
  std::unique_ptr<KvCache> kv_;
};

}  // namespace engram
