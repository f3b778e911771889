// Device work enqueued on a side stream and joined back into the current stream (fork-join), so
// that it shares the GPU with what the current stream runs meanwhile: KEEP's probes beside the
// attention of the recomputed rows (high priority: the host waits for their evidence), the
// changed memory units' forward beside the selective prefill that reads them (bench keep). On the
// CPU the work runs at once. (Several side streams for the runs' attention measured no better
// than one: bench/results/2026-11-26-h100-keep-side-streams.)
//
// Memory: the work may read tensors of the current stream (they stay alive and unreused until the
// join, which the current stream's later work follows); what it allocates stays on the side
// stream, so results the current stream reads go into memory allocated before the fork (or pool
// pages, or pinned host memory).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>

namespace engram::gpu {

class StreamFork {
 public:
  // The side stream waits for the work enqueued on the current stream so far. High priority: its
  // kernels are scheduled before those of default streams as SMs free up (small work that
  // something waits for, beside large kernels).
  explicit StreamFork(at::Device device, bool high_priority = false);
  ~StreamFork();  // joins if join() was not called
  StreamFork(const StreamFork&) = delete;
  StreamFork& operator=(const StreamFork&) = delete;

  // Enqueues `work` with the side stream current.
  void run(const std::function<void()>& work);
  // The current stream waits for the side stream's work.
  void join();

 private:
  struct Impl;
  at::Device device_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace engram::gpu
