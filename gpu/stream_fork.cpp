#include "gpu/stream_fork.h"

#ifdef ENGRAM_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <vector>

namespace engram::gpu {

struct StreamFork::Impl {
  bool joined = false;
#ifdef ENGRAM_WITH_CUDA
  std::vector<c10::cuda::CUDAStream> streams;
  std::vector<bool> used;
#endif
};

StreamFork::StreamFork(at::Device device, int lanes, bool high_priority)
    : device_(device), lanes_(std::max(1, lanes)), impl_(std::make_unique<Impl>()) {
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
    at::cuda::CUDAEvent forked;
    forked.record(current);
    for (int i = 0; i < lanes_; ++i) {
      impl_->streams.push_back(c10::cuda::getStreamFromPool(high_priority, device_.index()));
      forked.block(impl_->streams.back());
    }
    impl_->used.assign(static_cast<size_t>(lanes_), false);
  }
#endif
  (void)high_priority;
}

StreamFork::~StreamFork() {
  if (!impl_->joined) join();
}

void StreamFork::on_lane(int i, const std::function<void()>& work) {
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) {
    const size_t lane = static_cast<size_t>(i % lanes_);
    const c10::cuda::CUDAStreamGuard guard(impl_->streams[lane]);
    impl_->used[lane] = true;
    work();
    return;
  }
#endif
  (void)i;
  work();
}

void StreamFork::join() {
  impl_->joined = true;
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
    for (size_t lane = 0; lane < impl_->streams.size(); ++lane) {
      if (!impl_->used[lane]) continue;
      at::cuda::CUDAEvent done;
      done.record(impl_->streams[lane]);
      done.block(current);
    }
  }
#endif
}

}  // namespace engram::gpu
