// Page-locked host memory of exactly the bytes asked for, for a long-lived slab (the paged pool's
// pinned tier: waiting episodes, KEEP's units). PyTorch's caching host allocator rounds every
// pinned request up to a power of two and pins it in one driver call on one thread: a 4.8 GB
// episode pool locked 8 GB of the workstation's RAM and took seconds to appear. Here the pages
// are faulted in by several threads and then registered with CUDA once (what PyTorch's
// `pinned_use_cuda_host_register` does), and unlocked when the last tensor using them goes
// (after a device synchronize). Buffers allocated again and again (staging, per-request slabs)
// stay on gpu::empty_pinned, whose cache reuses them without a driver call.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace engram::gpu {

// Uninitialised page-locked memory of `shape` and `dtype` (CUDA builds with a device); throws
// std::runtime_error naming the size when the memory cannot be mapped or locked. Without CUDA,
// ordinary memory.
at::Tensor exact_pinned(at::IntArrayRef shape, at::ScalarType dtype);

}  // namespace engram::gpu
