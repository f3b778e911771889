#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <cmath>

#include "gpu/float_convert.cuh"
#include "gpu/louiskv_scoring.h"

namespace engram::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxDim = 256;  // d
constexpr int kMaxPerLane = kMaxDim / 32;
constexpr int kMaxGroup = 8;  // query heads per KV head

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
                                      float* decision) {
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
    const bool boundary = now == 0 || (stride > 0 ? now % stride == 0 : r < tau);
    decision[0] = boundary ? 1.f : 0.f;
    decision[1] = r;
  }
}

// The g logits of unit u against the group's queries (in shared memory), on every lane.
__device__ void unit_logits(const float* row, const float (*qs)[kMaxDim], int g, int64_t d,
                            float scale, int lane, float* logits) {
  float v[kMaxPerLane];
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t i = lane + 32 * e;
    v[e] = i < d ? row[i] : 0.f;
  }
  for (int j = 0; j < g; ++j) {
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int64_t i = lane + 32 * e;
      if (i < d) dot += v[e] * qs[j][i];
    }
    logits[j] = warp_sum(dot) * scale;
  }
}

// One block per KV head. Pass 1: warp w runs an online softmax (max, sum) per query head over
// units w, w + 8, ... in increasing order; the warps' states combine in warp order. Pass 2:
// each unit's score from its recomputed logits (the index rows come from L2 the second time).
// A unit's terms depend only on its index, never on how many units follow it.
template <typename T>
__global__ void louiskv_scores_kernel(const T* q, const float* index, const bool* live, int g,
                                      int64_t units, int64_t d, float scale, float* scores) {
  __shared__ float qs[kMaxGroup][kMaxDim];
  __shared__ float state[kWarps][kMaxGroup][2];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t head = blockIdx.x;
  for (int64_t i = threadIdx.x; i < g * d; i += blockDim.x)
    qs[i / d][i % d] = to_f(q[head * g * d + i]);
  __syncthreads();
  const float* rows = index + head * units * d;
  float m[kMaxGroup], s[kMaxGroup], logits[kMaxGroup];
  for (int j = 0; j < kMaxGroup; ++j) {
    m[j] = -INFINITY;
    s[j] = 0.f;
  }
  for (int64_t u = warp; u < units; u += kWarps) {
    if (live && !live[u]) continue;
    unit_logits(rows + u * d, qs, g, d, scale, lane, logits);
    for (int j = 0; j < g; ++j) {
      if (logits[j] > m[j]) {
        s[j] = s[j] * expf(m[j] - logits[j]) + 1.f;
        m[j] = logits[j];
      } else {
        s[j] += expf(logits[j] - m[j]);
      }
    }
  }
  if (lane == 0) {
    for (int j = 0; j < g; ++j) {
      state[warp][j][0] = m[j];
      state[warp][j][1] = s[j];
    }
  }
  __syncthreads();
  for (int j = 0; j < g; ++j) {
    float top = -INFINITY;
    for (int w = 0; w < kWarps; ++w)
      top = fmaxf(top, state[w][j][0]);
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      if (state[w][j][1] > 0.f) sum += state[w][j][1] * expf(state[w][j][0] - top);
    }
    m[j] = top;
    s[j] = sum;
  }
  float* out = scores + head * units;
  for (int64_t u = warp; u < units; u += kWarps) {
    if (live && !live[u]) {
      if (lane == 0) out[u] = 0.f;
      continue;
    }
    unit_logits(rows + u * d, qs, g, d, scale, lane, logits);
    float score = 0.f;
    for (int j = 0; j < g; ++j)
      score += expf(logits[j] - m[j]) / s[j];
    if (lane == 0) out[u] = score / static_cast<float>(g);
  }
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
                         double tau, int64_t stride, at::Tensor& decision) {
  const int64_t heads = q.size(0), d = q.size(1);
  by_dtype(q.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    louiskv_decide_kernel<T><<<1, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const T*>(q.data_ptr()), previous.data_ptr<float>(),
        step.data_ptr<int64_t>(), heads, d, static_cast<float>(tau), stride,
        decision.data_ptr<float>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor louiskv_scores_cuda(const at::Tensor& q, const at::Tensor& index,
                               const at::Tensor& live) {
  const int64_t heads = index.size(0), units = index.size(1), d = q.size(1);
  const int g = static_cast<int>(q.size(0) / heads);
  const at::Tensor rows = index.contiguous();
  at::Tensor scores = at::empty({heads, units}, index.options());
  if (scores.numel() == 0) return scores;
  const at::Tensor alive = live.defined() ? live.contiguous() : at::Tensor();
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  by_dtype(q.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    louiskv_scores_kernel<T><<<heads, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const T*>(q.data_ptr()), rows.data_ptr<float>(),
        alive.defined() ? alive.data_ptr<bool>() : nullptr, g, units, d, scale,
        scores.data_ptr<float>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return scores;
}

}  // namespace engram::gpu
