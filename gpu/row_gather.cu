#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "gpu/row_gather.h"

namespace engram::gpu {
namespace {

// As gpu/page_gather.cu: a few blocks keep enough loads in flight to fill PCIe from pinned
// memory while the compute stream keeps most SMs.
constexpr int64_t kGatherBlocks = 32;
constexpr int kGatherThreads = 512;

// Work item = one 16-byte vector of one destination row of K or V; consecutive threads copy
// consecutive vectors of a row. A row past the table is skipped, never read: the host checks
// nothing (that would synchronise on every layer's load); the reference throws for a table entry
// outside the slab.
__global__ void gather_paged_rows_kernel(const uint4* slab, uint4* keys, uint4* values,
                                         const int64_t* table, const int64_t* rows,
                                         int64_t table_pages, int64_t heads, int64_t picked,
                                         int64_t page_rows, int64_t row_vecs, int64_t layer,
                                         int64_t layers, int64_t dst_head_stride,
                                         int64_t dst_row_stride, const bool* enabled) {
  if (enabled && !*enabled) return;
  const int64_t total = 2 * heads * picked * row_vecs;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < total;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t vec = w % row_vecs, item = w / row_vecs;
    const int64_t j = item % picked, head = (item / picked) % heads, kv = item / (picked * heads);
    const int64_t row = rows[head * picked + j];
    if (row < 0 || row / page_rows >= table_pages) continue;
    const int64_t page = table[row / page_rows];
    const int64_t src =
        ((((page * layers + layer) * 2 + kv) * heads + head) * page_rows + row % page_rows) *
            row_vecs +
        vec;
    (kv == 0 ? keys : values)[head * dst_head_stride + j * dst_row_stride + vec] = slab[src];
  }
}

}  // namespace

void gather_paged_rows_cuda(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab,
                            int64_t layer, const at::Tensor& table, const at::Tensor& rows,
                            const at::Tensor& enabled) {
  const int64_t heads = keys.size(0), dim = keys.size(2), elt = keys.element_size();
  const bool readable =
      slab.is_contiguous() && (slab.is_cuda() ? slab.device() == keys.device() : slab.is_pinned());
  const bool vectors = (dim * elt) % 16 == 0 && keys.stride(2) == 1 &&
                       values.strides() == keys.strides() && (keys.stride(1) * elt) % 16 == 0 &&
                       (keys.stride(0) * elt) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(keys.data_ptr()) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(values.data_ptr()) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(slab.data_ptr()) % 16 == 0;
  if (!readable || !vectors || !table.is_cuda() || !rows.is_cuda()) {
    gather_paged_rows_reference(keys, values, slab, layer, table, rows, enabled);
    return;
  }
  const at::Tensor r = rows.contiguous(), t = table.contiguous();
  const int64_t picked = r.size(1), row_vecs = dim * elt / 16;
  const int64_t total = 2 * heads * picked * row_vecs;
  if (total == 0) return;
  const void* from = slab.data_ptr();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  if (!slab.is_cuda() && capturing == cudaStreamCaptureStatusNone) {
    // Inside a recording (the recorded decode step) the host address is used as it is: pinned
    // memory is mapped at the same address under unified addressing, and a runtime query there
    // could invalidate the capture.
    void* mapped = nullptr;
    C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, slab.data_ptr(), 0));
    from = mapped;
  }
  const int64_t blocks =
      std::min<int64_t>(kGatherBlocks, (total + kGatherThreads - 1) / kGatherThreads);
  gather_paged_rows_kernel<<<blocks, kGatherThreads, 0, stream>>>(
      static_cast<const uint4*>(from), static_cast<uint4*>(keys.data_ptr()),
      static_cast<uint4*>(values.data_ptr()), t.data_ptr<int64_t>(), r.data_ptr<int64_t>(),
      t.numel(), heads, picked, slab.size(4), row_vecs, layer, slab.size(1),
      keys.stride(0) * elt / 16, keys.stride(1) * elt / 16,
      enabled.defined() ? enabled.data_ptr<bool>() : nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace engram::gpu
