// Marks on a device's timeline and a copy stream, with one API for CUDA and the CPU.
// On CUDA a mark is an event recorded on the compute or the copy stream (so the layer timeline
// shows what the GPU did, not when the host enqueued it); on the CPU it is a steady_clock reading.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace engram::gpu {

enum class Lane : uint8_t { kCompute, kCopy };

class DeviceTimeline {
 public:
  explicit DeviceTimeline(at::Device device);
  ~DeviceTimeline();
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;

  // Records a mark on the lane's stream; returns its id.
  int64_t mark(Lane lane);
  // Waits for every mark and returns each one's time in microseconds since the first mark.
  std::vector<double> resolve_us();
  // Wall-clock time of the first mark (for absolute timestamps in traces).
  std::chrono::system_clock::time_point origin() const { return origin_; }
  bool is_cuda() const { return device_.is_cuda(); }
  at::Device device() const { return device_; }

  // The copy lane: host→device copies issued here overlap compute on CUDA. On the CPU they run
  // at once. `dst` must be on the device, `src` in (pinned) host memory. Returns the id of a
  // copy-lane mark recorded after the copy.
  int64_t copy_async(at::Tensor& dst, const at::Tensor& src);
  // Runs `enqueue` with the copy stream current (after the compute enqueued so far, as
  // copy_async): the work it launches (a gather kernel, several copies) goes on the copy lane.
  // Tensors it writes must outlive that work (the caller keeps them). Returns the mark after it.
  // `after_compute` false: the work may start at once, for destinations no compute touches
  // until it has waited for this work's mark (a loader's per-layer buffers).
  int64_t on_copy_lane(const std::function<void()>& enqueue, bool after_compute = true);
  // Makes the compute stream wait until the copy-lane mark `copy_mark` has been reached.
  void compute_wait(int64_t copy_mark);
  // Makes the stream current on the host wait until `mark` has been reached: inside
  // on_copy_lane the copy lane, under a side stream's guard that stream. A CUDA wait on a mark
  // is only as good as the mark's record: record it on the host first.
  void stream_wait(int64_t mark);
  // Whether the device has passed the mark, without waiting (cudaEventQuery); always true on
  // the CPU, where work runs when it is issued. For a loader that keeps the copy engine busy
  // only while compute runs (KEEP's layer-balanced loading).
  bool reached(int64_t mark) const;
  // Blocks the host until the device has passed `mark` (and nothing enqueued after it).
  void wait(int64_t mark);

  // A device tensor copied into pinned host memory behind the compute enqueued so far; the host
  // may read the result once it has waited for a compute mark recorded after this call. The
  // work enqueued after the copy keeps the device busy while the host waits for that mark alone
  // (a `.cpu()` would wait for the whole stream). On the CPU it is `src` itself.
  at::Tensor copy_to_host(const at::Tensor& src);

 private:
  struct Impl;
  at::Device device_;
  std::unique_ptr<Impl> impl_;
  std::chrono::system_clock::time_point origin_;
};

// Page-locked host memory when CUDA is available (copies from it can be asynchronous), ordinary
// memory otherwise.
at::Tensor empty_pinned(at::IntArrayRef shape, at::ScalarType dtype);
bool pinned_memory_available();
// `pinned` (from empty_pinned) as a tensor of `device`: on CUDA kernels read and write it in place
// over PCIe (unified addressing, as gpu::gather_pages reads its pinned slab), and the view keeps
// it alive. For a CPU device (or without CUDA), `pinned` itself.
at::Tensor device_view_of_pinned(const at::Tensor& pinned, at::Device device);

// `src` copied into pinned host memory behind the work enqueued so far, not waited for (read it
// after a wait for that work); on the CPU `src` itself.
at::Tensor copy_to_pinned(const at::Tensor& src);

// Host indices on the device, uploaded through pinned memory without a wait: a pageable upload
// makes PyTorch wait for the whole stream, which drains the device in the middle of its work.
at::Tensor upload_indices(const std::vector<int64_t>& indices, at::Device device);

}  // namespace engram::gpu
