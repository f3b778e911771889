#include "gpu/side_worker.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#ifdef ENGRAM_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace engram::gpu {

struct SideWorker::Impl {
  struct Work {
    std::function<void()> run;
#ifdef ENGRAM_WITH_CUDA
    std::shared_ptr<at::cuda::CUDAEvent> after;  // the submitter's stream when submitted
#endif
  };
  at::Device device;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Work> queue;
  bool closed = false;
  bool joined = false;
  std::exception_ptr error;
  std::thread thread;
#ifdef ENGRAM_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> stream;
#endif

  explicit Impl(at::Device d) : device(d) {}

  void loop() {
#ifdef ENGRAM_WITH_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> on_stream;
    if (stream) on_stream.emplace(*stream);  // also makes the stream's device current
#endif
    for (;;) {
      Work work;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return closed || !queue.empty(); });
        if (queue.empty()) return;
        work = std::move(queue.front());
        queue.pop_front();
        if (error) continue;  // after a failure the rest is skipped
      }
      try {
#ifdef ENGRAM_WITH_CUDA
        if (work.after) work.after->block(*stream);
#endif
        work.run();
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
    }
  }
};

SideWorker::SideWorker(at::Device device, bool high_priority)
    : impl_(std::make_unique<Impl>(device)) {
#ifdef ENGRAM_WITH_CUDA
  if (device.is_cuda()) impl_->stream = c10::cuda::getStreamFromPool(high_priority, device.index());
#endif
  (void)high_priority;
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

SideWorker::~SideWorker() {
  if (impl_->joined) return;
  try {
    join();
  } catch (...) {  // a destructor reports nothing; join() is where errors surface
  }
}

void SideWorker::submit(std::function<void()> work) {
  Impl::Work w;
  w.run = std::move(work);
#ifdef ENGRAM_WITH_CUDA
  if (impl_->stream) {
    w.after = std::make_shared<at::cuda::CUDAEvent>();
    w.after->record(c10::cuda::getCurrentCUDAStream(impl_->device.index()));
  }
#endif
  {
    const std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->closed) throw std::logic_error("SideWorker: submit after join");
    impl_->queue.push_back(std::move(w));
  }
  impl_->wake.notify_one();
}

void SideWorker::join() {
  if (impl_->joined) return;
  {
    const std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->closed = true;
  }
  impl_->wake.notify_one();
  impl_->thread.join();
  impl_->joined = true;
#ifdef ENGRAM_WITH_CUDA
  if (impl_->stream) {
    at::cuda::CUDAEvent done;
    done.record(*impl_->stream);
    done.block(c10::cuda::getCurrentCUDAStream(impl_->device.index()));
  }
#endif
  if (impl_->error) std::rethrow_exception(impl_->error);
}

void SideWorker::hand_over(const at::Tensor& t) const {
#ifdef ENGRAM_WITH_CUDA
  if (impl_->stream && t.defined() && t.is_cuda())
    t.record_stream(c10::cuda::getCurrentCUDAStream(impl_->device.index()));
#endif
  (void)t;
}

}  // namespace engram::gpu
