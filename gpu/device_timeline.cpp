#include "gpu/device_timeline.h"

#ifdef ENGRAM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace engram::gpu {

struct DeviceTimeline::Impl {
  std::vector<std::chrono::steady_clock::time_point> cpu_marks;
#ifdef ENGRAM_WITH_CUDA
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events;
  std::optional<c10::cuda::CUDAStream> copy_stream;
#endif
};

DeviceTimeline::DeviceTimeline(at::Device device)
    : device_(device), impl_(std::make_unique<Impl>()), origin_(std::chrono::system_clock::now()) {
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) {
    impl_->copy_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
  }
#endif
}

DeviceTimeline::~DeviceTimeline() = default;

int64_t DeviceTimeline::mark(Lane lane) {
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) {
    auto event = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    if (lane == Lane::kCopy) {
      event->record(*impl_->copy_stream);
    } else {
      event->record(c10::cuda::getCurrentCUDAStream(device_.index()));
    }
    if (impl_->events.empty()) origin_ = std::chrono::system_clock::now();
    impl_->events.push_back(std::move(event));
    return static_cast<int64_t>(impl_->events.size()) - 1;
  }
#endif
  (void)lane;
  if (impl_->cpu_marks.empty()) origin_ = std::chrono::system_clock::now();
  impl_->cpu_marks.push_back(std::chrono::steady_clock::now());
  return static_cast<int64_t>(impl_->cpu_marks.size()) - 1;
}

std::vector<double> DeviceTimeline::resolve_us() {
  std::vector<double> out;
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) {
    if (impl_->events.empty()) return out;
    impl_->events.back()->synchronize();
    for (auto& e : impl_->events)
      e->synchronize();
    for (auto& e : impl_->events) {
      out.push_back(1000.0 * impl_->events.front()->elapsed_time(*e));
    }
    return out;
  }
#endif
  if (impl_->cpu_marks.empty()) return out;
  for (auto t : impl_->cpu_marks) {
    out.push_back(std::chrono::duration<double, std::micro>(t - impl_->cpu_marks.front()).count());
  }
  return out;
}

int64_t DeviceTimeline::copy_async(at::Tensor& dst, const at::Tensor& src) {
  return on_copy_lane([&] {
    dst.copy_(src, /*non_blocking=*/device_.is_cuda() && src.is_pinned());
#ifdef ENGRAM_WITH_CUDA
    // The destination is used on the compute stream later: keep its memory from being reused by
    // the caching allocator before the copy (on the copy stream, current here) has finished.
    if (device_.is_cuda()) dst.record_stream(c10::cuda::getCurrentCUDAStream(device_.index()));
#endif
  });
}

int64_t DeviceTimeline::on_copy_lane(const std::function<void()>& enqueue, bool after_compute) {
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) {
    // The work may write memory that compute enqueued so far still reads (the caching allocator
    // hands freed blocks back at once): the copy lane starts after that compute.
    if (after_compute) {
      at::cuda::CUDAEvent compute_point;
      compute_point.record(c10::cuda::getCurrentCUDAStream(device_.index()));
      compute_point.block(*impl_->copy_stream);
    }
    {
      c10::cuda::CUDAStreamGuard guard(*impl_->copy_stream);
      enqueue();
    }
    return mark(Lane::kCopy);
  }
#endif
  (void)after_compute;
  enqueue();
  return mark(Lane::kCopy);
}

void DeviceTimeline::compute_wait(int64_t copy_mark) {
  stream_wait(copy_mark);
}

void DeviceTimeline::stream_wait(int64_t mark) {
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) {
    impl_->events.at(mark)->block(c10::cuda::getCurrentCUDAStream(device_.index()));
  }
#endif
  (void)mark;
}

bool DeviceTimeline::reached(int64_t mark) const {
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) return impl_->events.at(mark)->query();
#endif
  (void)mark;
  return true;
}

void DeviceTimeline::wait(int64_t mark) {
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) impl_->events.at(mark)->synchronize();
#endif
  (void)mark;
}

at::Tensor DeviceTimeline::copy_to_host(const at::Tensor& src) {
  return copy_to_pinned(src);
}

at::Tensor copy_to_pinned(const at::Tensor& src) {
  if (!src.is_cuda()) return src;
  at::Tensor host = empty_pinned(src.sizes(), src.scalar_type());
  host.copy_(src, /*non_blocking=*/true);
  return host;
}

at::Tensor upload_indices(const std::vector<int64_t>& indices, at::Device device) {
  const auto n = static_cast<int64_t>(indices.size());
  if (!device.is_cuda()) return at::tensor(indices, at::kLong);
  at::Tensor host = empty_pinned({n}, at::kLong);
  std::copy(indices.begin(), indices.end(), host.data_ptr<int64_t>());
  return host.to(device, /*non_blocking=*/true);
}

bool pinned_memory_available() {
#ifdef ENGRAM_WITH_CUDA
  return at::hasCUDA();
#else
  return false;
#endif
}

at::Tensor empty_pinned(at::IntArrayRef shape, at::ScalarType dtype) {
  return at::empty(shape,
                   at::TensorOptions().dtype(dtype).pinned_memory(pinned_memory_available()));
}

at::Tensor device_view_of_pinned(const at::Tensor& pinned, at::Device device) {
#ifdef ENGRAM_WITH_CUDA
  if (device.is_cuda()) {
    if (!pinned.is_pinned())
      throw std::invalid_argument("device_view_of_pinned: the tensor is not page-locked");
    // With its index: tensors of "cuda" and "cuda:0" are different devices to some checks.
    const at::Device on(
        at::kCUDA, device.has_index() ? device.index()
                                      : static_cast<c10::DeviceIndex>(c10::cuda::current_device()));
    // The device address of the allocation's start, then the view's offset into it.
    const auto* const base = static_cast<const char*>(pinned.storage().data());
    void* mapped = nullptr;
    C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, const_cast<char*>(base), 0));
    mapped = static_cast<char*>(mapped) + (static_cast<const char*>(pinned.data_ptr()) - base);
    return at::for_blob(mapped, pinned.sizes())
        .strides(pinned.strides())
        .context(new at::Tensor(pinned),
                 [](void* owner) { delete static_cast<at::Tensor*>(owner); })
        .options(pinned.options().pinned_memory(false).device(on))
        .target_device(on)
        .make_tensor();
  }
#endif
  (void)device;
  return pinned;
}

}  // namespace engram::gpu
