// A host thread with a stream of its own, for device work that needs the host between its
// kernels (k-means reads a count back every round) and should run beside what the calling
// thread enqueues meanwhile (LouisKV clusters a layer's prompt keys while the prefill computes
// the next layers: "This KV clustering and offloading process occurs asynchronously with the
// prefill forward pass", §4). A StreamFork (gpu/stream_fork.h) cannot: a host wait inside its
// work stops the caller's enqueue.
//
// Each submitted work runs on the worker thread, in submission order, with the side stream
// current, after the device work the submitting thread's current stream had enqueued when it was
// submitted. Off CUDA it is the same thread and queue (the work sees what the caller wrote before
// submitting). join() waits for all of it and orders the caller's current stream after it.
//
// Memory: the work may read tensors the caller keeps alive and leaves unwritten until join().
// Tensors it returns were allocated on the side stream: hand_over() each one the caller will use,
// so that freeing it later waits for the caller's stream.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>

namespace engram::gpu {

class SideWorker {
 public:
  // High priority: the side stream's blocks are scheduled before the default streams' as SMs
  // free up, so work that a host loop waits on between kernels does not queue behind a prefill's
  // long GEMMs (k-means beside a 32K prefill took 64 ms a layer at default priority, 13 alone).
  explicit SideWorker(at::Device device, bool high_priority = true);
  ~SideWorker();  // waits for the queued work; its errors are dropped
  SideWorker(const SideWorker&) = delete;
  SideWorker& operator=(const SideWorker&) = delete;

  void submit(std::function<void()> work);
  // Waits for every submitted work and orders the current stream after its device work; then
  // rethrows the first exception a work threw. Nothing may be submitted after it.
  void join();
  // The caller's current stream will use `t` (allocated by the work): its memory is not reused
  // before that stream's work enqueued so far is done.
  void hand_over(const at::Tensor& t) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace engram::gpu
