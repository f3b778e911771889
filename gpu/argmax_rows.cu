#include "gpu/argmax_rows.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <cstdint>

namespace engram::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = 8;                      // independent loads in flight a thread
constexpr int64_t kChunk = kThreads * kPerThread;  // elements a block of the first pass reads

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

// The block's first (value, index) in that order, in thread 0.
__device__ inline void block_keep(float& v, int64_t& i) {
  __shared__ float s_v[kWarps];
  __shared__ int64_t s_i[kWarps];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float v2 = __shfl_xor_sync(0xffffffffu, v, off);
    const int64_t i2 = __shfl_xor_sync(0xffffffffu, i, off);
    keep(v, i, v2, i2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s_v[warp] = v;
    s_i[warp] = i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w)
      keep(v, i, s_v[w], s_i[w]);
  }
}

// Pass 1, block (chunk, row): the chunk's first (value, index) into part_v / part_i [rows,
// chunks]. A thread's eight loads are independent, so they are all in flight at once (one block
// walking a 128K row alone was latency-bound: ~21 us on the H200).
__global__ void __launch_bounds__(kThreads)
    argmax_chunks_kernel(const float* logits, int64_t row_stride, int64_t vocab, float* part_v,
                         int64_t* part_i) {
  const float* row = logits + blockIdx.y * row_stride;
  const int64_t base = blockIdx.x * kChunk + threadIdx.x;
  float x[kPerThread];
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int64_t j = base + e * kThreads;
    x[e] = j < vocab ? row[j] : -INFINITY;
  }
  float best = -INFINITY;
  int64_t best_i = vocab;  // past every index: any element goes before it (NaN or -inf too)
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int64_t j = base + e * kThreads;
    if (j < vocab) keep(best, best_i, x[e], j);
  }
  block_keep(best, best_i);
  if (threadIdx.x == 0) {
    part_v[blockIdx.y * gridDim.x + blockIdx.x] = best;
    part_i[blockIdx.y * gridDim.x + blockIdx.x] = best_i;
  }
}

// Pass 2, one block a row: the first of its chunks' picks.
__global__ void __launch_bounds__(kThreads)
    argmax_pick_kernel(const float* part_v, const int64_t* part_i, int64_t chunks, int64_t vocab,
                       int64_t* out) {
  float best = -INFINITY;
  int64_t best_i = vocab;
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads)
    keep(best, best_i, part_v[blockIdx.x * chunks + c], part_i[blockIdx.x * chunks + c]);
  block_keep(best, best_i);
  if (threadIdx.x == 0) out[blockIdx.x] = best_i;
}

}  // namespace

void argmax_rows_cuda(const at::Tensor& logits, at::Tensor& out) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (rows == 0) return;
  const int64_t chunks = (vocab + kChunk - 1) / kChunk;
  // Freed at return: the caching allocator hands the blocks out again only to work queued after
  // these kernels on this stream (in a capture, the graph's pool keeps them).
  at::Tensor part_v = at::empty({rows, chunks}, logits.options());
  at::Tensor part_i = at::empty({rows, chunks}, out.options());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  argmax_chunks_kernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(rows)), kThreads,
                         0, stream>>>(logits.data_ptr<float>(), logits.stride(0), vocab,
                                      part_v.data_ptr<float>(), part_i.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  argmax_pick_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      part_v.data_ptr<float>(), part_i.data_ptr<int64_t>(), chunks, vocab, out.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace engram::gpu
