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

// Work item = one `Word` of one destination row: consecutive threads copy consecutive words of
// a row, so a row of 128 bf16 is 16 threads reading 256 contiguous bytes. Strides are in words.
// A row outside the pool is skipped, never read: the host checks nothing (that would synchronise
// on every layer's load), and the reference path throws for it.
template <typename Word>
__global__ void gather_rows_kernel(const Word* src, Word* dst, const int64_t* rows, int64_t heads,
                                   int64_t picked, int64_t pool_rows, int64_t row_words,
                                   int64_t dst_head_stride, int64_t dst_row_stride,
                                   int64_t dst_word_stride) {
  const int64_t total = heads * picked * row_words;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < total;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t item = w / row_words, word = w % row_words;
    const int64_t head = item / picked, j = item % picked;
    const int64_t row = rows[item];
    if (row < 0 || row >= pool_rows) continue;
    dst[head * dst_head_stride + j * dst_row_stride + word * dst_word_stride] =
        src[(head * pool_rows + row) * row_words + word];
  }
}

template <typename Word>
void launch(const void* src, at::Tensor& dst, const at::Tensor& rows, int64_t pool_rows,
            int64_t row_words, int64_t word_stride) {
  const int64_t heads = rows.size(0), picked = rows.size(1);
  const int64_t words = static_cast<int64_t>(sizeof(Word)) / dst.element_size();
  const int64_t total = heads * picked * row_words;
  const int64_t blocks =
      std::min<int64_t>(kGatherBlocks, (total + kGatherThreads - 1) / kGatherThreads);
  gather_rows_kernel<Word><<<blocks, kGatherThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      static_cast<const Word*>(src), static_cast<Word*>(dst.data_ptr()), rows.data_ptr<int64_t>(),
      heads, picked, pool_rows, row_words, dst.stride(0) / words, dst.stride(1) / words,
      word_stride);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void gather_rows_cuda(at::Tensor& dst, const at::Tensor& src, const at::Tensor& rows) {
  // The kernel reads src in place: it must be contiguous and either on dst's device or pinned
  // (mapped under unified addressing). Anything else goes through the reference, which gives
  // the same result by way of a host gather and a copy.
  const bool readable =
      src.is_contiguous() && (src.is_cuda() ? src.device() == dst.device() : src.is_pinned());
  if (!readable) {
    gather_rows_reference(dst, src, rows);
    return;
  }
  const int64_t heads = src.size(0), pool_rows = src.size(1), dim = src.size(2);
  const at::Tensor r = rows.to(dst.device()).contiguous();
  if (heads * r.size(1) * dim == 0) return;
  const void* from = src.data_ptr();
  if (!src.is_cuda()) {
    void* mapped = nullptr;
    C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, src.data_ptr(), 0));
    from = mapped;
  }
  const int64_t elt = dst.element_size();
  const bool vectors = (dim * elt) % 16 == 0 && dst.stride(2) == 1 &&
                       (dst.stride(1) * elt) % 16 == 0 && (dst.stride(0) * elt) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(dst.data_ptr()) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(from) % 16 == 0;
  if (vectors) {
    launch<uint4>(from, dst, r, pool_rows, dim * elt / 16, 1);
    return;
  }
  // Element by element, as raw words of the dtype's size (a copy needs no arithmetic).
  switch (elt) {
    case 1:
      launch<uint8_t>(from, dst, r, pool_rows, dim, dst.stride(2));
      break;
    case 2:
      launch<uint16_t>(from, dst, r, pool_rows, dim, dst.stride(2));
      break;
    case 4:
      launch<uint32_t>(from, dst, r, pool_rows, dim, dst.stride(2));
      break;
    case 8:
      launch<uint64_t>(from, dst, r, pool_rows, dim, dst.stride(2));
      break;
    default:
      gather_rows_reference(dst, src, rows);
      break;
  }
}

}  // namespace engram::gpu
