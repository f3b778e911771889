#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>

#include "gpu/softmax_column_max.h"

namespace engram::gpu {
namespace {

constexpr int kThreads = 256;

// One block per row: the row's max, then the sum of exp(s - max), in f32; lse = max + log(sum).
__global__ void __launch_bounds__(kThreads)
    row_lse_kernel(const float* __restrict__ scores, float* __restrict__ lse, int64_t cols) {
  const float* row = scores + static_cast<int64_t>(blockIdx.x) * cols;
  __shared__ float partial[kThreads / 32];
  __shared__ float shared_max;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads)
    m = fmaxf(m, row[c]);
  for (int off = 16; off > 0; off /= 2)
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float v = partial[0];
    for (int w = 1; w < kThreads / 32; ++w)
      v = fmaxf(v, partial[w]);
    shared_max = v;
  }
  __syncthreads();
  m = shared_max;
  if (m == -INFINITY) {  // every column hidden from this row
    if (threadIdx.x == 0) lse[blockIdx.x] = -INFINITY;
    return;
  }
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads)
    sum += expf(row[c] - m);
  for (int off = 16; off > 0; off /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, off);
  __syncthreads();  // partial[] is reused
  if (lane == 0) partial[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float v = 0.f;
    for (int w = 0; w < kThreads / 32; ++w)
      v += partial[w];
    lse[blockIdx.x] = m + logf(v);
  }
}

// One thread per (group, column): the max over the group's rows of s - lse, then its exp.
// Adjacent threads read adjacent columns of a row (coalesced).
__global__ void __launch_bounds__(kThreads)
    column_max_kernel(const float* __restrict__ scores, const float* __restrict__ lse,
                      float* __restrict__ out, int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  const int64_t group = blockIdx.y;
  const float* s = scores + group * rows * cols + c;
  const float* l = lse + group * rows;
  float best = -INFINITY;
#pragma unroll 4
  for (int64_t n = 0; n < rows; ++n) {
    const float ln = l[n];
    if (ln != -INFINITY) best = fmaxf(best, s[n * cols] - ln);
  }
  out[group * cols + c] = expf(best);
}

}  // namespace

at::Tensor softmax_column_max_cuda(const at::Tensor& scores) {
  const int64_t b = scores.size(0), h = scores.size(1), n = scores.size(2), c = scores.size(3);
  at::Tensor lse = at::empty({b, h, n}, scores.options());
  at::Tensor out = at::empty({b, h, c}, scores.options());
  const auto stream = at::cuda::getCurrentCUDAStream();
  row_lse_kernel<<<static_cast<unsigned>(b * h * n), kThreads, 0, stream>>>(
      scores.data_ptr<float>(), lse.data_ptr<float>(), c);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const dim3 grid(static_cast<unsigned>((c + kThreads - 1) / kThreads),
                  static_cast<unsigned>(b * h));
  column_max_kernel<<<grid, kThreads, 0, stream>>>(scores.data_ptr<float>(), lse.data_ptr<float>(),
                                                   out.data_ptr<float>(), n, c);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace engram::gpu
