#include "gpu/argmax_rows.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>

namespace engram::gpu {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// Whether (a, ia) goes before (b, ib): at::argmax's order (ATen's GreaterOrNan): a NaN first, the
// larger value next, the lower index among equals.
__device__ inline bool before(float a, int64_t ia, float b, int64_t ib) {
  if (isnan(a)) return !isnan(b) || ia < ib;
  if (isnan(b)) return false;
  return a == b ? ia < ib : a > b;
}

__device__ inline void keep(float& v, int64_t& i, float v2, int64_t i2) {
  if (before(v2, i2, v, i)) {
    v = v2;
    i = i2;
  }
}

// One block per row: each thread walks its share (16-byte loads where the row allows: four
// independent loads in flight), then warps and the block reduce (value, index) pairs.
__global__ void __launch_bounds__(kThreads)
    argmax_rows_kernel(const float* logits, int64_t row_stride, int64_t vocab, int64_t* out) {
  __shared__ float s_v[kWarps];
  __shared__ int64_t s_i[kWarps];
  const float* row = logits + blockIdx.x * row_stride;
  float best = -INFINITY;
  int64_t best_i = vocab;  // past every index: any element goes before it (NaN or -inf too)
  const bool aligned = (reinterpret_cast<uintptr_t>(row) % 16) == 0;
  int64_t tail = 0;
  if (aligned) {
    const int64_t quads = vocab / 4;
    const float4* q = reinterpret_cast<const float4*>(row);
#pragma unroll 4
    for (int64_t j = threadIdx.x; j < quads; j += kThreads) {
      const float4 x = q[j];
      keep(best, best_i, x.x, 4 * j);
      keep(best, best_i, x.y, 4 * j + 1);
      keep(best, best_i, x.z, 4 * j + 2);
      keep(best, best_i, x.w, 4 * j + 3);
    }
    tail = quads * 4;
  }
  for (int64_t j = tail + threadIdx.x; j < vocab; j += kThreads)
    keep(best, best_i, row[j], j);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, best, off);
    const int64_t i = __shfl_xor_sync(0xffffffffu, best_i, off);
    keep(best, best_i, v, i);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s_v[warp] = best;
    s_i[warp] = best_i;
  }
  __syncthreads();
  if (warp != 0) return;
  best = s_v[lane];
  best_i = s_i[lane];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, best, off);
    const int64_t i = __shfl_xor_sync(0xffffffffu, best_i, off);
    keep(best, best_i, v, i);
  }
  if (lane == 0) out[blockIdx.x] = best_i;
}

}  // namespace

void argmax_rows_cuda(const at::Tensor& logits, at::Tensor& out) {
  const int64_t rows = logits.size(0);
  if (rows == 0) return;
  argmax_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0,
                       at::cuda::getCurrentCUDAStream()>>>(
      logits.data_ptr<float>(), logits.stride(0), logits.size(1), out.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace engram::gpu
