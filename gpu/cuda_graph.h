// A piece of device work recorded once and replayed: on CUDA a CUDA graph, so that a decode
// step of ~1,300 small kernels costs one launch instead of ~12 µs of host time per op; on the
// CPU the function itself, run again at every replay (same results, no recording).
//
// The recorded function must be replay-safe: it reads only tensors whose storage outlives the
// graph, updated in place before replay(), and has no host-dependent shapes or host syncs.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>

namespace engram::gpu {

class DeviceGraph {
 public:
  explicit DeviceGraph(at::Device device);
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  // Records `work` (dropping an earlier recording). On CUDA it runs once first on a side stream
  // (lazy cuBLAS/allocator setup must not happen during capture), then is captured there; the
  // warm-up's effects are those of one ordinary run. On the CPU nothing runs yet.
  void capture(std::function<void()> work);
  // Runs the recorded work on the current stream.
  void replay();
  void reset();
  bool captured() const { return static_cast<bool>(work_); }
  bool is_cuda() const { return device_.is_cuda(); }

 private:
  struct Impl;
  at::Device device_;
  std::function<void()> work_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace engram::gpu
