#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "gpu/budgeted_select.h"

namespace engram::gpu {
namespace {

// One block per head sorts its units in shared memory (8 bytes a unit, up to 128 KiB of the
// H100's 227): at LouisKV's average cluster size of 16 tokens (louiskv-paper §5.1) that is a
// 256K-token prompt's clusters and segments. More units go through the reference path.
constexpr int64_t kMaxSortedUnits = kBudgetedSelectMaxUnits;
constexpr int kSelectThreads = 1024;

// The reference's stable descending sort: a higher score first, equal scores by unit index.
// Unit indices are distinct, so this is a strict total order (NaN is read as -inf) and any
// correct sort gives the stable sort's result.
__device__ bool comes_first(float score_a, int index_a, float score_b, int index_b) {
  return score_a > score_b || (score_a == score_b && index_a < index_b);
}

// rows[h, j] for j < budget: sort (bitonic, over a power of two `padded` >= units, padding
// last), prefix-sum the sorted sizes into ends[h, :] (inclusive; a global scratch, as shared
// memory holds the sort), then every output position finds its unit by binary search on ends.
__global__ void budgeted_select_kernel(const float* scores, const int64_t* sizes,
                                       const int64_t* offsets, int64_t units, int64_t size_stride,
                                       int64_t offset_stride, int padded, int64_t budget,
                                       const bool* enabled, int64_t* ends, int64_t* rows) {
  if (enabled && !*enabled) return;  // the policy decided on the device not to retrieve
  extern __shared__ int64_t shared[];
  int64_t* partial = shared;                                        // [kSelectThreads]
  float* key = reinterpret_cast<float*>(partial + kSelectThreads);  // [padded]
  int* order = reinterpret_cast<int*>(key + padded);                // [padded]

  const int64_t head = blockIdx.x;
  const float* score = scores + head * units;
  const int64_t* size = sizes + head * size_stride;
  const int64_t* offset = offsets + head * offset_stride;
  int64_t* end = ends + head * units;
  int64_t* out = rows + head * budget;

  // Padding has index >= units and score -inf: after every real unit, -inf ones included.
  for (int i = threadIdx.x; i < padded; i += blockDim.x) {
    // NaN sorts as -inf: the reference's order for it is unspecified (NaN breaks its
    // comparison), and here it must not bring padding before a real unit.
    const float v = i < units ? score[i] : -INFINITY;
    key[i] = isnan(v) ? -INFINITY : v;
    order[i] = i;
  }
  __syncthreads();
  for (int span = 2; span <= padded; span *= 2) {
    for (int stride = span / 2; stride > 0; stride /= 2) {
      for (int i = threadIdx.x; i < padded; i += blockDim.x) {
        const int partner = i ^ stride;
        if (partner <= i) continue;
        // Pairs in the first half of each `span` end up in order, in the second half reversed:
        // the bitonic sequences the next span merges.
        const bool forward = (i & span) == 0;
        const bool swap = forward ? comes_first(key[partner], order[partner], key[i], order[i])
                                  : comes_first(key[i], order[i], key[partner], order[partner]);
        if (swap) {
          const float k = key[i];
          key[i] = key[partner];
          key[partner] = k;
          const int o = order[i];
          order[i] = order[partner];
          order[partner] = o;
        }
      }
      __syncthreads();
    }
  }

  // Padding and negative sizes count as 0 tokens (the reference takes nothing of the latter).
  auto tokens_of = [&](int sorted) -> int64_t {
    const int u = order[sorted];
    const int64_t tokens = u < units ? size[u] : 0;
    return tokens > 0 ? tokens : 0;
  };
  // Each thread sums a contiguous run of the sorted units; a Hillis-Steele scan over the runs.
  const int run = (padded + blockDim.x - 1) / blockDim.x;
  const int first = threadIdx.x * run;
  const int last = first + run < padded ? first + run : padded;
  int64_t local = 0;
  for (int i = first; i < last; ++i)
    local += tokens_of(i);
  partial[threadIdx.x] = local;
  __syncthreads();
  for (int step = 1; step < blockDim.x; step *= 2) {
    const int64_t add = threadIdx.x >= step ? partial[threadIdx.x - step] : 0;
    __syncthreads();
    partial[threadIdx.x] += add;
    __syncthreads();
  }
  int64_t running = partial[threadIdx.x] - local;
  for (int i = first; i < last && i < units; ++i) {
    running += tokens_of(i);
    end[i] = running;
  }
  __syncthreads();  // ends (global) are visible to the whole block after this barrier

  const int64_t total = end[units - 1];
  for (int64_t j = threadIdx.x; j < budget; j += blockDim.x) {
    if (j >= total) {
      out[j] = -1;
      continue;
    }
    // The first sorted unit whose end passes j (a zero-size unit shares its predecessor's end,
    // so it is never the first).
    int64_t lo = 0, hi = units - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (end[mid] > j)
        hi = mid;
      else
        lo = mid + 1;
    }
    const int u = order[lo];
    out[j] = offset[u] + (j - (end[lo] - tokens_of(static_cast<int>(lo))));
  }
}

}  // namespace

at::Tensor budgeted_select_rows_cuda(const at::Tensor& scores, const at::Tensor& sizes,
                                     const at::Tensor& offsets, int64_t budget,
                                     const at::Tensor& enabled) {
  const int64_t heads = scores.size(0), units = scores.size(1);
  if (units > kMaxSortedUnits) {
    // More units than one block sorts in shared memory: the reference (a host round trip and a
    // synchronisation), so the result stays the same whatever the count.
    return budgeted_select_rows_reference(scores, sizes, offsets, budget, enabled);
  }
  const at::Device device = scores.device();
  at::Tensor rows = at::empty({heads, budget}, scores.options().dtype(at::kLong));
  if (rows.numel() == 0) return rows;
  if (units == 0) return rows.fill_(-1);
  const at::Tensor s = scores.to(at::kFloat).contiguous();
  // Rows of a wider table (a recorded step's first units of a fixed capacity) are read in place.
  const auto rows_in_place = [&](const at::Tensor& t) {
    const at::Tensor on = t.to(device);
    return on.stride(1) == 1 ? on : on.contiguous();
  };
  const at::Tensor n = rows_in_place(sizes), o = rows_in_place(offsets);
  at::Tensor ends = at::empty({heads, units}, rows.options());
  int padded = 1;
  while (padded < units)
    padded *= 2;
  const size_t shared = kSelectThreads * sizeof(int64_t) + padded * (sizeof(float) + sizeof(int));
  if (shared > 48 * 1024) {
    // Above 48 KiB a kernel's dynamic shared memory must be asked for.
    C10_CUDA_CHECK(cudaFuncSetAttribute(budgeted_select_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)));
  }
  budgeted_select_kernel<<<heads, kSelectThreads, shared, at::cuda::getCurrentCUDAStream()>>>(
      s.data_ptr<float>(), n.data_ptr<int64_t>(), o.data_ptr<int64_t>(), units, n.stride(0),
      o.stride(0), padded, budget, enabled.defined() ? enabled.data_ptr<bool>() : nullptr,
      ends.data_ptr<int64_t>(), rows.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return rows;
}

}  // namespace engram::gpu
