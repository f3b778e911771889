// Independent pieces of device work enqueued on side streams and joined back into the current
// stream (fork-join): small kernels that each fill a part of the GPU (KEEP's attention per run of
// rows, a flash call of ~100 queries over 40 heads) run side by side instead of one after another.
// On the CPU every piece runs at once, in order.
//
// Memory: a piece may read tensors of the current stream (they stay alive and unreused until the
// join, which the current stream's later work follows) and should write its results into tensors
// allocated before the fork; what it allocates itself stays on its lane's stream.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>

namespace engram::gpu {

class StreamFork {
 public:
  // `lanes` side streams (at least 1) wait for the work enqueued on the current stream so far.
  StreamFork(at::Device device, int lanes);
  ~StreamFork();  // joins if join() was not called
  StreamFork(const StreamFork&) = delete;
  StreamFork& operator=(const StreamFork&) = delete;

  int lanes() const { return lanes_; }
  // Enqueues `work` with lane (i % lanes)'s stream current.
  void on_lane(int i, const std::function<void()>& work);
  // The current stream waits for every lane's work.
  void join();

 private:
  struct Impl;
  at::Device device_;
  int lanes_;
  std::unique_ptr<Impl> impl_;
};

// Side streams for the attention calls of KEEP's runs of rows (attention_by_runs):
// ENGRAM_ATTENTION_LANES, default 1. One lane already takes the runs off the compute stream, so
// the probes run beside them; on the H100 (qwen2.5-14b shape, 40 segments) 4 lanes measured the
// same (83.7 vs 83.1 ms) and 8 slower (87.3): the calls split over keys and fill the GPU already.
int attention_lanes();

}  // namespace engram::gpu
