#include "gpu/cuda_graph.h"

#include <stdexcept>

#ifdef ENGRAM_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace engram::gpu {

struct DeviceGraph::Impl {
#ifdef ENGRAM_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

DeviceGraph::DeviceGraph(at::Device device) : device_(device), impl_(std::make_unique<Impl>()) {
#ifndef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) throw std::invalid_argument("DeviceGraph: built without CUDA");
#endif
}

DeviceGraph::~DeviceGraph() = default;

void DeviceGraph::reset() {
#ifdef ENGRAM_WITH_CUDA
  impl_->graph.reset();
#endif
  work_ = nullptr;
}

void DeviceGraph::capture(std::function<void()> work) {
  reset();
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) {
    const c10::DeviceIndex index =
        device_.index() < 0 ? c10::cuda::current_device() : device_.index();
    c10::cuda::CUDAGuard device_guard(index);
    // Capture cannot happen on the legacy default stream, and the side stream must see every
    // write enqueued so far (the prefill that filled the cache).
    c10::cuda::device_synchronize();
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    {
      c10::cuda::CUDAStreamGuard stream_guard(side);
      work();
      side.synchronize();
      auto graph = std::make_unique<at::cuda::CUDAGraph>();
      // Thread-local: a CUDA call another thread makes meanwhile (a pool being page-locked, a
      // side worker's copy) neither fails nor invalidates this capture.
      graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        work();
      } catch (...) {
        // Ends the capture so that the stream is usable again, then reports the first error.
        try {
          graph->capture_end();
        } catch (...) {
        }
        throw;
      }
      graph->capture_end();
      impl_->graph = std::move(graph);
    }
    c10::cuda::device_synchronize();
  }
#endif
  work_ = std::move(work);
}

void DeviceGraph::replay() {
  if (!work_) throw std::logic_error("DeviceGraph::replay before capture");
#ifdef ENGRAM_WITH_CUDA
  if (impl_->graph) {
    impl_->graph->replay();
    return;
  }
#endif
  work_();
}

}  // namespace engram::gpu
