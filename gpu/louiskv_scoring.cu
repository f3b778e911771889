#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <cmath>

#include "gpu/env_flag.h"
#include "gpu/float_convert.cuh"
#include "gpu/louiskv_scoring.h"

namespace engram::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ float warp_sum(float v) {
  // A butterfly: every lane ends with the same bits (each step adds two values that commute).
  for (int offset = 16; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffff, v, offset);
  return v;
}

// One block: warp w takes query heads w, w + 8, ...; cos per head, then r over the heads in a
// fixed order. Each warp reads and then overwrites only its own heads' previous queries.
template <typename T>
__global__ void louiskv_decide_kernel(const T* q, float* previous, const int64_t* step,
                                      int64_t heads, int64_t d, float tau, int64_t stride,
                                      float* decision, float* layer_tau, float up, float down) {
  __shared__ float partial[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float total = 0.f;
  for (int64_t h = warp; h < heads; h += kWarps) {
    float dot = 0.f, qq = 0.f, pp = 0.f;
    for (int64_t i = lane; i < d; i += 32) {
      const float a = to_f(q[h * d + i]), b = previous[h * d + i];
      dot += a * b;
      qq += a * a;
      pp += b * b;
    }
    dot = warp_sum(dot);
    qq = warp_sum(qq);
    pp = warp_sum(pp);
    // torch's cosine_similarity: x·y / sqrt(max(|x|²|y|², eps²)), eps = 1e-8.
    total += dot / sqrtf(fmaxf(qq * pp, 1e-16f));
    for (int64_t i = lane; i < d; i += 32)
      previous[h * d + i] = to_f(q[h * d + i]);
  }
  if (lane == 0) partial[warp] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w)
      sum += partial[w];
    const float r = sum / static_cast<float>(heads);
    const int64_t now = *step;
    const float limit = layer_tau ? *layer_tau : tau;
    const bool below = r < limit;
    const bool boundary = now == 0 || (stride > 0 ? now % stride == 0 : below);
    decision[0] = boundary ? 1.f : 0.f;
    decision[1] = r;
    if (layer_tau && stride == 0 && now > 0)
      *layer_tau = fminf(fmaxf(limit + (below ? down : up), -1.f), kLayerTauCeiling);
  }
}

// Scores in two launches that a recorded step can switch off (`enabled`), both spread over the
// units (a first fused kernel with one block per KV head was 8x slower than torch ops: 8 blocks
// on a 132-SM card; a second launch of a block per KV head was 0.05 ms a token slower than this
// one on the 8B shape, bench/results/2026-11-27-h100-louiskv-scores-off). 1: a block takes 32 units
// of one KV head (unit_logits_vec_kernel: eight lanes a unit; unit_logits_kernel, for rows the
// vector loads do not fit: a warp a unit): the logits of each query head of the group, and the
// block's max and sum of exp for each query head (online softmax partials). 2: a block takes 256
// units of one KV head, combines the partials of every block of the head (a warp a query head) and
// writes each unit's mean over the group of its softmax.
constexpr int kUnitsPerBlock = 32;  // = a warp's lanes: the partials are a warp reduction
constexpr int kMeanUnitsPerBlock = kThreads;

// A warp a query head, a lane a unit of the block: the block's max and sum of exp of the logits
// (0 when none is live), its softmax partials.
__device__ void block_partials(const float (*block_logits)[kUnitsPerBlock], int64_t h,
                               int64_t group, int64_t blocks, float* partial_max,
                               float* partial_sum) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t j = warp; j < group; j += kWarps) {
    const float v = block_logits[j][lane];
    float m = v;
    for (int offset = 16; offset > 0; offset /= 2)
      m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, offset));
    const float e = m == -INFINITY ? 0.f : expf(v - m);
    const float sum = warp_sum(e);
    if (lane == 0) {
      partial_max[(h * group + j) * blocks + blockIdx.x] = m;
      partial_sum[(h * group + j) * blocks + blockIdx.x] = sum;
    }
  }
}

// The block's KV head's group of queries (n values) into shared memory, in f32.
template <typename TQ>
__device__ void stage_group_queries(const TQ* q, int64_t n, float* group_q) {
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    group_q[i] = to_f(q[i]);
  __syncthreads();
}

template <typename TQ, typename TI>
__global__ void unit_logits_kernel(const TQ* q, const TI* index, int64_t index_head_stride,
                                   const bool* live, const bool* enabled, int64_t group,
                                   int64_t units, int64_t d, float scale, float* logits,
                                   float* partial_max, float* partial_sum) {
  if (enabled && !*enabled) return;   // the layer decided on the device not to retrieve
  extern __shared__ float group_q[];  // [group, d] of this KV head, in f32
  __shared__ float block_logits[kMaxScoreGroup][kUnitsPerBlock];
  const int64_t h = blockIdx.y, blocks = gridDim.x;
  stage_group_queries(q + h * group * d, group * d, group_q);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kUnitsPerBlock;
  for (int k = warp; k < kUnitsPerBlock; k += kWarps) {
    const int64_t u = first + k;
    if (u >= units) {
      for (int j = lane; j < group; j += 32)
        block_logits[j][k] = -INFINITY;
      continue;
    }
    const TI* key = index + h * index_head_stride + u * d;
    float acc[kMaxScoreGroup];
#pragma unroll
    for (int j = 0; j < kMaxScoreGroup; ++j)
      acc[j] = 0.f;
    for (int64_t i = lane; i < d; i += 32) {
      const float kv = to_f(key[i]);
#pragma unroll
      for (int j = 0; j < kMaxScoreGroup; ++j)
        if (j < group) acc[j] += group_q[j * d + i] * kv;
    }
    const bool alive = live == nullptr || live[u];
#pragma unroll
    for (int j = 0; j < kMaxScoreGroup; ++j) {
      if (j >= group) break;
      const float dot = warp_sum(acc[j]);
      const float logit = alive ? dot * scale : -INFINITY;
      if (lane == 0) {
        logits[(h * group + j) * units + u] = logit;
        block_logits[j][k] = logit;
      }
    }
  }
  __syncthreads();
  block_partials(block_logits, h, group, blocks, partial_max, partial_sum);
}

// Four units a warp, eight lanes a unit: each lane reads four elements (one 8-byte load of a
// bf16/f16 index, 16 bytes of f32) at every 32nd element, and the eight lanes of a unit add up
// in three shuffles per query head. The first kernel (a warp a unit, 2-byte loads, a 32-lane sum
// per query head) made a scoring ~7 µs a layer slower than cuBLAS's path on the 8B shape.
// Needs d % 32 == 0 and the index's rows aligned to their 4-element loads. 8B shape, 32K in, a
// retrieval at every token: 12.19 ms/token against 13.09 with the first kernel and 12.83 with the
// torch ops (bench/results/2026-11-28-h100-louiskv-vector-scores).
constexpr int kLanesPerUnit = 8;
constexpr int kUnitsPerWarp = 32 / kLanesPerUnit;

using engram::gpu::load4;  // f32 rows (gpu/float_convert.cuh); 16-bit ones below
template <typename T2>
__device__ inline void load4_half2(const void* p, float v[4]) {
  const uint2 x = *reinterpret_cast<const uint2*>(p);
  const T2 a = *reinterpret_cast<const T2*>(&x.x), b = *reinterpret_cast<const T2*>(&x.y);
  v[0] = to_f(a.x);
  v[1] = to_f(a.y);
  v[2] = to_f(b.x);
  v[3] = to_f(b.y);
}
__device__ inline void load4(const __nv_bfloat16* p, float v[4]) {
  load4_half2<__nv_bfloat162>(p, v);
}
__device__ inline void load4(const __half* p, float v[4]) {
  load4_half2<__half2>(p, v);
}

template <typename TQ, typename TI>
__global__ void unit_logits_vec_kernel(const TQ* q, const TI* index, int64_t index_head_stride,
                                       const bool* live, const bool* enabled, int64_t group,
                                       int64_t units, int64_t d, float scale, float* logits,
                                       float* partial_max, float* partial_sum) {
  if (enabled && !*enabled) return;   // the layer decided on the device not to retrieve
  extern __shared__ float group_q[];  // [group, d] of this KV head, in f32
  __shared__ float block_logits[kMaxScoreGroup][kUnitsPerBlock];
  const int64_t h = blockIdx.y, blocks = gridDim.x;
  stage_group_queries(q + h * group * d, group * d, group_q);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int part = lane % kLanesPerUnit;
  const int k = warp * kUnitsPerWarp + lane / kLanesPerUnit;  // the unit in the block
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kUnitsPerBlock + k;
  float acc[kMaxScoreGroup];
#pragma unroll
  for (int j = 0; j < kMaxScoreGroup; ++j)
    acc[j] = 0.f;
  if (u < units) {
    const TI* key = index + h * index_head_stride + u * d;
    for (int64_t i = 4 * part; i < d; i += 4 * kLanesPerUnit) {
      float kv[4];
      load4(key + i, kv);
#pragma unroll
      for (int j = 0; j < kMaxScoreGroup; ++j) {
        if (j >= group) break;
        const float4 qv = *reinterpret_cast<const float4*>(group_q + j * d + i);
        acc[j] += qv.x * kv[0] + qv.y * kv[1] + qv.z * kv[2] + qv.w * kv[3];
      }
    }
  }
  const bool alive = u < units && (live == nullptr || live[u]);
#pragma unroll
  for (int j = 0; j < kMaxScoreGroup; ++j) {
    if (j >= group) break;
    float dot = acc[j];
    for (int offset = kLanesPerUnit / 2; offset > 0; offset /= 2)
      dot += __shfl_xor_sync(0xffffffff, dot, offset);
    const float logit = alive ? dot * scale : -INFINITY;
    if (part == 0) {
      if (u < units) logits[(h * group + j) * units + u] = logit;
      block_logits[j][k] = logit;
    }
  }
  __syncthreads();
  block_partials(block_logits, h, group, blocks, partial_max, partial_sum);
}

__global__ void unit_softmax_mean_kernel(const float* logits, const float* partial_max,
                                         const float* partial_sum, int64_t partials,
                                         const bool* enabled, int64_t group, int64_t units,
                                         float* scores) {
  if (enabled && !*enabled) return;
  __shared__ float peak[kMaxScoreGroup], total[kMaxScoreGroup];
  const int64_t h = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t j = warp; j < group; j += kWarps) {
    const float* pm = partial_max + (h * group + j) * partials;
    const float* ps = partial_sum + (h * group + j) * partials;
    float m = -INFINITY;
    for (int64_t b = lane; b < partials; b += 32)
      m = fmaxf(m, pm[b]);
    for (int offset = 16; offset > 0; offset /= 2)
      m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, offset));
    float sum = 0.f;
    for (int64_t b = lane; b < partials; b += 32)
      sum += pm[b] == -INFINITY ? 0.f : ps[b] * expf(pm[b] - m);
    sum = warp_sum(sum);
    if (lane == 0) {
      peak[j] = m;
      total[j] = sum;
    }
  }
  __syncthreads();
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kMeanUnitsPerBlock + threadIdx.x;
  if (u >= units) return;
  float mean = 0.f;
  for (int64_t j = 0; j < group; ++j)
    mean += expf(logits[(h * group + j) * units + u] - peak[j]) / total[j];
  scores[h * units + u] = mean / static_cast<float>(group);
}

template <typename F>
void by_dtype(at::ScalarType t, F&& f) {
  if (t == at::kFloat) {
    f(float{});
  } else if (t == at::kBFloat16) {
    f(__nv_bfloat16{});
  } else {
    f(__half{});
  }
}

}  // namespace

void louiskv_decide_cuda(const at::Tensor& q, at::Tensor& previous, const at::Tensor& step,
                         double tau, int64_t stride, at::Tensor& decision,
                         const LayerTau* layer_tau) {
  const int64_t heads = q.size(0), d = q.size(1);
  by_dtype(q.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    louiskv_decide_kernel<T><<<1, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const T*>(q.data_ptr()), previous.data_ptr<float>(),
        step.data_ptr<int64_t>(), heads, d, static_cast<float>(tau), stride,
        decision.data_ptr<float>(), layer_tau ? layer_tau->threshold.data_ptr<float>() : nullptr,
        layer_tau ? layer_tau->up : 0.f, layer_tau ? layer_tau->down : 0.f);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor louiskv_scores_cuda(const at::Tensor& q, const at::Tensor& index, const at::Tensor& live,
                               const at::Tensor& enabled) {
  const int64_t heads = index.size(0), units = index.size(1), d = q.size(1);
  const int64_t group = q.size(0) / heads;
  const int64_t blocks = (units + kUnitsPerBlock - 1) / kUnitsPerBlock;
  const auto f32 = index.options().dtype(at::kFloat);
  at::Tensor logits = at::empty({heads, group, units}, f32);
  at::Tensor partials = at::empty({2, heads, group, blocks}, f32);  // max, sum of exp
  at::Tensor scores = at::empty({heads, units}, f32);
  const bool* on = enabled.defined() ? enabled.data_ptr<bool>() : nullptr;
  const auto stream = at::cuda::getCurrentCUDAStream();
  // ENGRAM_WARP_SCORES=1: the first logits kernel (a warp a unit), the peer in benchmarks.
  static const bool warp_scores = env_flag("ENGRAM_WARP_SCORES");
  float* partial_max = partials.data_ptr<float>();
  float* partial_sum = partial_max + heads * group * blocks;
  by_dtype(q.scalar_type(), [&](auto q_tag) {
    by_dtype(index.scalar_type(), [&](auto index_tag) {
      using TQ = decltype(q_tag);
      using TI = decltype(index_tag);
      const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(heads));
      // The vector loads need 4-element rows aligned to their size (8 bytes, f32 16).
      const int64_t align = 4 * static_cast<int64_t>(sizeof(TI));
      const bool vec = !warp_scores && d % 32 == 0 &&
                       reinterpret_cast<uintptr_t>(index.data_ptr()) % align == 0 &&
                       index.stride(0) * static_cast<int64_t>(sizeof(TI)) % align == 0;
      const auto kernel = vec ? unit_logits_vec_kernel<TQ, TI> : unit_logits_kernel<TQ, TI>;
      kernel<<<grid, kThreads, group * d * sizeof(float), stream>>>(
          reinterpret_cast<const TQ*>(q.data_ptr()), reinterpret_cast<const TI*>(index.data_ptr()),
          index.stride(0), live.defined() ? live.data_ptr<bool>() : nullptr, on, group, units, d,
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))), logits.data_ptr<float>(),
          partial_max, partial_sum);
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const dim3 grid(static_cast<unsigned>((units + kMeanUnitsPerBlock - 1) / kMeanUnitsPerBlock),
                  static_cast<unsigned>(heads));
  unit_softmax_mean_kernel<<<grid, kThreads, 0, stream>>>(logits.data_ptr<float>(), partial_max,
                                                          partial_sum, blocks, on, group, units,
                                                          scores.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return scores;
}

}  // namespace engram::gpu
