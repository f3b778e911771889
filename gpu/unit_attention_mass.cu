#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <stdexcept>

#include "gpu/float_convert.cuh"
#include "gpu/unit_attention_mass.h"

namespace engram::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float o = __shfl_xor_sync(0xffffffff, v, offset);
    v = kMax ? fmaxf(v, o) : v + o;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read from the previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : (kMax ? -INFINITY : 0.f);
  for (int offset = 16; offset > 0; offset /= 2) {
    const float o = __shfl_xor_sync(0xffffffff, v, offset);
    v = kMax ? fmaxf(v, o) : v + o;
  }
  return v;  // every lane of every warp holds the block's result
}

// One block per (head, row): the row's softmax statistics over its visible keys, then one warp
// per unit sums exp(s - max) over the unit's visible keys. partial[row, head, unit] = mass / sum.
template <typename T>
__global__ void unit_mass_kernel(const T* scores, const int64_t* positions,
                                 const int64_t* unit_begin, const int64_t* unit_end, float* partial,
                                 int64_t heads, int64_t rows, int64_t t, int64_t units,
                                 float scale) {
  const int64_t head = blockIdx.x % heads, row = blockIdx.x / heads;
  const T* s = scores + (head * rows + row) * t;
  const int64_t limit = min(t, positions[row] + 1);
  __shared__ float scratch[kWarps];
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < limit; i += kThreads)
    m = fmaxf(m, to_f(s[i]) * scale);
  m = block_reduce<true>(m, scratch);
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < limit; i += kThreads)
    sum += expf(to_f(s[i]) * scale - m);
  sum = block_reduce<false>(sum, scratch);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t u = warp; u < units; u += kWarps) {
    const int64_t end = min(unit_end[u], limit);
    float acc = 0.f;
    for (int64_t i = unit_begin[u] + lane; i < end; i += 32)
      acc += expf(to_f(s[i]) * scale - m);
    for (int offset = 16; offset > 0; offset /= 2)
      acc += __shfl_xor_sync(0xffffffff, acc, offset);
    if (lane == 0) partial[(row * heads + head) * units + u] = sum > 0.f ? acc / sum : 0.f;
  }
}

template <typename T>
void launch(const at::Tensor& scores, const at::Tensor& positions, const at::Tensor& begin,
            const at::Tensor& end, at::Tensor& partial, double scale) {
  const int64_t heads = scores.size(0), rows = scores.size(1), t = scores.size(2);
  const int64_t units = begin.size(0);
  if (heads * rows == 0 || units == 0) return;
  unit_mass_kernel<T><<<heads * rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const T*>(scores.data_ptr()), positions.data_ptr<int64_t>(),
      begin.data_ptr<int64_t>(), end.data_ptr<int64_t>(), partial.data_ptr<float>(), heads, rows, t,
      units, static_cast<float>(scale));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor unit_attention_mass_cuda(const at::Tensor& scores, const at::Tensor& positions,
                                    const at::Tensor& unit_begin, const at::Tensor& unit_end,
                                    double scale) {
  const int64_t heads = scores.size(0), rows = scores.size(1), units = unit_begin.size(0);
  // [rows, heads, units]: the head mean is one small deterministic reduction after the kernel.
  at::Tensor partial = at::zeros({rows, heads, units}, scores.options().dtype(at::kFloat));
  switch (scores.scalar_type()) {
    case at::kFloat:
      launch<float>(scores, positions, unit_begin, unit_end, partial, scale);
      break;
    case at::kBFloat16:
      launch<__nv_bfloat16>(scores, positions, unit_begin, unit_end, partial, scale);
      break;
    case at::kHalf:
      launch<__half>(scores, positions, unit_begin, unit_end, partial, scale);
      break;
    default:
      throw std::invalid_argument("unit_attention_mass: scores must be f32, bf16 or f16");
  }
  return partial.mean(1);
}

}  // namespace engram::gpu
