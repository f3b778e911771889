#include "gpu/exact_pinned.h"

#ifdef ENGRAM_WITH_CUDA
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace engram::gpu {

#ifdef ENGRAM_WITH_CUDA
namespace {

// Writes one byte of every page so that the kernel backs them now, several pages at once: the
// registration then only locks pages that exist (faulting them is most of a pinning's time).
void fault_in(char* base, size_t bytes, size_t page) {
  const size_t pages = bytes / page;
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  const size_t per = (pages + threads - 1) / threads;
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads && t * per < pages; ++t) {
    workers.emplace_back([=] {
      const size_t end = std::min(pages, (t + 1) * per);
      for (size_t p = t * per; p < end; ++p)
        static_cast<volatile char*>(base)[p * page] = 0;
    });
  }
  for (std::thread& w : workers)
    w.join();
}

std::string gib(size_t bytes) {
  return std::to_string(static_cast<double>(bytes) / static_cast<double>(1ULL << 30)) + " GiB";
}

}  // namespace
#endif

at::Tensor exact_pinned(at::IntArrayRef shape, at::ScalarType dtype) {
#ifdef ENGRAM_WITH_CUDA
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(shape)) * c10::elementSize(dtype);
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = std::max(page, (bytes + page - 1) / page * page);
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    throw std::runtime_error("page-locked host memory: mapping " + gib(mapped) + " failed");
  fault_in(static_cast<char*>(base), mapped, page);
  // Mapped: kernels read the slab in place (device_view_of_pinned); portable: any context.
  const cudaError_t error =
      cudaHostRegister(base, mapped, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it for the next CUDA call
    munmap(base, mapped);
    throw std::runtime_error("page-locked host memory: locking " + gib(mapped) +
                             " failed: " + cudaGetErrorString(error));
  }
  return at::from_blob(
      base, shape,
      [mapped](void* p) {
        // Copies from or into the slab may still be queued: they finish before it is unlocked.
        (void)cudaDeviceSynchronize();
        (void)cudaHostUnregister(p);
        (void)cudaGetLastError();  // at exit the runtime may already be gone
        munmap(p, mapped);
      },
      at::TensorOptions().dtype(dtype));
#else
  return at::empty(shape, at::TensorOptions().dtype(dtype));
#endif
}

}  // namespace engram::gpu
