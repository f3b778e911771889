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

}  // namespace engram::gpu
