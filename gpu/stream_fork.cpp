#include "gpu/stream_fork.h"

#ifdef ENGRAM_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>
#endif

namespace engram::gpu {

struct StreamFork::Impl {
  bool joined = false;
#ifdef ENGRAM_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> stream;
#endif
};

StreamFork::StreamFork(at::Device device, bool high_priority)
    : device_(device), impl_(std::make_unique<Impl>()) {
#ifdef ENGRAM_WITH_CUDA
  if (device_.is_cuda()) {
    impl_->stream = c10::cuda::getStreamFromPool(high_priority, device_.index());
    at::cuda::CUDAEvent forked;
    forked.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    forked.block(*impl_->stream);
  }
#endif
  (void)high_priority;
}

StreamFork::~StreamFork() {
  if (!impl_->joined) join();
}

void StreamFork::run(const std::function<void()>& work) {
#ifdef ENGRAM_WITH_CUDA
  if (impl_->stream) {
    const c10::cuda::CUDAStreamGuard guard(*impl_->stream);
    work();
    return;
  }
#endif
  work();
}

void StreamFork::join() {
  impl_->joined = true;
#ifdef ENGRAM_WITH_CUDA
  if (impl_->stream) {
    at::cuda::CUDAEvent done;
    done.record(*impl_->stream);
    done.block(c10::cuda::getCurrentCUDAStream(device_.index()));
  }
#endif
}

}  // namespace engram::gpu
