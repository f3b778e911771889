// Independent device work enqueued on side streams and joined back into the current stream
// (fork-join), so that it shares the GPU with what the current stream runs meanwhile: KEEP's
// probes beside the attention of the recomputed rows (high priority: the host waits for their
// evidence), the changed memory units' forward beside the selective prefill that reads them
// (bench keep). On the CPU every piece runs at once, in order.
//
// Memory: a piece may read tensors of the current stream (they stay alive and unreused until the
// join, which the current stream's later work follows); what it allocates stays on its lane's
// stream, so results the current stream reads go into memory allocated before the fork (or pool
// pages, or pinned host memory).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>

namespace engram::gpu {

class StreamFork {
 public:
  // `lanes` side streams (at least 1) wait for the work enqueued on the current stream so far.
  // High priority: their kernels are scheduled before those of default streams as SMs free up
  // (small work that something waits for, beside large kernels).
  StreamFork(at::Device device, int lanes, bool high_priority = false);
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

}  // namespace engram::gpu
