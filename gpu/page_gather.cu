#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "gpu/env_flag.h"
#include "gpu/page_gather.h"

namespace engram::gpu {
namespace {

// 32 blocks of 512 threads: with one load in flight per thread (~256 KiB) pinned reads reached
// 79-90 % of a contiguous cudaMemcpy's PCIe rate on an H100 (42.8-48.8 of 54 GB/s, bench pages,
// 2026-11-25), on a quarter of its SMs; each thread now keeps kLoadsInFlight loads in flight.
constexpr int64_t kGatherBlocks = 32;
// Loads a thread keeps in flight (below).
constexpr int kLoadsInFlight = 4;

// Work item = (page, k/v, head): counts[i] rows of `row_vecs` 16-byte vectors from the page's
// row first_rows[i] (0 without first_rows),
// read from the slab (over PCIe when it is pinned host memory) into the destination, or, with
// kToSlab, written from the working set into the slab. A few blocks stride over the items:
// enough loads in flight to fill PCIe, while the compute stream's kernels keep most SMs (one
// block per item slowed the overlapped forward down).
template <bool kToSlab, int kInFlight>
__global__ void page_copy_kernel(uint4* slab, uint4* keys, uint4* values, const int64_t* pages,
                                 const int64_t* slots, const int64_t* counts,
                                 const int64_t* first_rows, int64_t items, int64_t heads,
                                 int64_t tokens, int64_t row_vecs, int64_t page_vecs,
                                 int64_t layer_vecs, int64_t head_stride_vecs, int64_t capacity) {
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t head = item % heads;
    const int64_t kv = (item / heads) % 2;
    const int64_t i = item / (2 * heads);
    const int64_t slot = slots[i];
    const int64_t count = counts[i];
    const int64_t first = first_rows ? first_rows[i] : 0;
    // The loader claimed these slots; an out-of-range entry is skipped rather than written.
    if (slot < 0 || count < 0 || first < 0 || first + count > tokens || slot + count > capacity)
      continue;
    uint4* page = slab + pages[i] * page_vecs + layer_vecs +
                  ((kv * heads + head) * tokens + first) * row_vecs;
    uint4* ws = (kv == 0 ? keys : values) + head * head_stride_vecs + slot * row_vecs;
    const int64_t n = count * row_vecs;  // the page's rows are contiguous at both ends
    const uint4* from = kToSlab ? ws : page;
    uint4* to = kToSlab ? page : ws;
    // kInFlight loads issued before their stores: a thread keeps that many 16-byte reads in
    // flight over PCIe instead of one (a store would otherwise come before the next load, as the
    // two pointers may alias).
    const int64_t step = blockDim.x;
    int64_t j = threadIdx.x;
    for (; j + (kInFlight - 1) * step < n; j += kInFlight * step) {
      uint4 v[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        v[u] = from[j + u * step];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        to[j + u * step] = v[u];
    }
    for (; j < n; j += step)
      to[j] = from[j];
  }
}

// Launches the copy when the layouts allow 16-byte vectors; false: the caller uses the reference.
template <bool kToSlab>
bool launch_page_copy(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& slab,
                      int64_t layer, const at::Tensor& pages, const at::Tensor& slots,
                      const at::Tensor& counts, const at::Tensor& first_rows = {}) {
  const int64_t n = pages.numel();
  if (n == 0) return true;
  const int64_t heads = keys.size(0), capacity = keys.size(1), dim = keys.size(2);
  const int64_t tokens = slab.size(4), layers = slab.size(1);
  const int64_t elt = keys.element_size();
  const bool aligned = (dim * elt) % 16 == 0 && keys.stride(2) == 1 && values.stride(2) == 1 &&
                       keys.stride(1) == dim && values.strides() == keys.strides() &&
                       (keys.stride(0) * elt) % 16 == 0 && slab.is_contiguous() &&
                       reinterpret_cast<uintptr_t>(keys.data_ptr()) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(values.data_ptr()) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(slab.data_ptr()) % 16 == 0;
  if (!aligned || !pages.is_cuda() || !slots.is_cuda() || !counts.is_cuda()) return false;
  if (first_rows.defined() &&
      (!first_rows.is_cuda() || first_rows.numel() != n || first_rows.scalar_type() != at::kLong))
    return false;
  void* mapped = slab.data_ptr();
  if (!slab.is_cuda()) {
    // Pinned host memory is mapped under unified addressing; ask for its device address.
    C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, slab.data_ptr(), 0));
  }
  const int64_t row_vecs = dim * elt / 16;
  const int64_t page_vecs = layers * 2 * heads * tokens * row_vecs;
  const int64_t layer_vecs = layer * 2 * heads * tokens * row_vecs;
  const int64_t head_stride_vecs = keys.stride(0) * elt / 16;
  const int64_t items = n * 2 * heads;
  const int64_t blocks = std::min<int64_t>(items, kGatherBlocks);
  // ENGRAM_PAGE_COPY_ONE_LOAD=1: one load in flight per thread (the kernel before 2026-11-27
  // session 13), the peer the benchmarks measure in the same build.
  static const bool one_load = env_flag("ENGRAM_PAGE_COPY_ONE_LOAD");
  const auto kernel =
      one_load ? page_copy_kernel<kToSlab, 1> : page_copy_kernel<kToSlab, kLoadsInFlight>;
  kernel<<<blocks, 512, 0, at::cuda::getCurrentCUDAStream()>>>(
      static_cast<uint4*>(mapped), static_cast<uint4*>(keys.data_ptr()),
      static_cast<uint4*>(values.data_ptr()), pages.data_ptr<int64_t>(), slots.data_ptr<int64_t>(),
      counts.data_ptr<int64_t>(), first_rows.defined() ? first_rows.data_ptr<int64_t>() : nullptr,
      items, heads, tokens, row_vecs, page_vecs, layer_vecs, head_stride_vecs, capacity);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

}  // namespace

void gather_pages_cuda(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab, int64_t layer,
                       const at::Tensor& pages, const at::Tensor& slots, const at::Tensor& counts) {
  if (!launch_page_copy<false>(keys, values, slab, layer, pages, slots, counts))
    gather_pages_reference(keys, values, slab, layer, pages, slots, counts);
}

void scatter_pages_cuda(at::Tensor& slab, int64_t layer, const at::Tensor& keys,
                        const at::Tensor& values, const at::Tensor& pages, const at::Tensor& slots,
                        const at::Tensor& counts, const at::Tensor& first_rows) {
  if (!launch_page_copy<true>(keys, values, slab, layer, pages, slots, counts, first_rows))
    scatter_pages_reference(slab, layer, keys, values, pages, slots, counts, first_rows);
}

}  // namespace engram::gpu
