#include "gpu/device_timeline.h"
#include "gpu/float_convert.cuh"
#include "gpu/kv_compaction.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>

namespace engram::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kPairs = 16;  // (slot, dimension pair)s a thread holds per chunk

// One block per (K or V, layer, head) row of slots, walked in chunks of kThreads·kPairs / half
// slots: a chunk's sources are read into registers, the block synchronises, then the chunk's
// slots are written. Sources are at or after their slot (index[j] >= j), so a later chunk never
// reads what an earlier one wrote, and within a chunk every read precedes every write.
template <typename T>
__global__ void compact_kv_kernel(T* const* bases, int64_t layers, int64_t heads,
                                  int64_t head_stride, int64_t n, int64_t half,
                                  const int64_t* index, const int64_t* positions,
                                  const float* inv_freq) {
  const int64_t b = blockIdx.x;
  const int64_t h = b % heads, l = (b / heads) % layers, kv = b / (heads * layers);
  T* base = bases[kv * layers + l] + h * head_stride;
  const int64_t* idx = index + (l * heads + h) * n;
  const int64_t chunk = kThreads * kPairs / half;
  float x1[kPairs], x2[kPairs];
  for (int64_t j0 = 0; j0 < n; j0 += chunk) {
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int64_t combo = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      const int64_t j = j0 + combo / half, i = combo % half;
      if (j >= n) continue;
      const int64_t from = idx[j];
      const T* src = base + from * 2 * half;
      const float a = to_f(src[i]);
      const float z = to_f(src[i + half]);
      if (kv == 0) {  // as rope_rotate_kernel, by the delta j - positions[from]
        const float angle = static_cast<float>(j - positions[from]) * inv_freq[i];
        float s, c;
        sincosf(angle, &s, &c);
        x1[k] = a * c - z * s;
        x2[k] = z * c + a * s;
      } else {
        x1[k] = a;
        x2[k] = z;
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int64_t combo = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      const int64_t j = j0 + combo / half, i = combo % half;
      if (j >= n) continue;
      T* dst = base + j * 2 * half;
      dst[i] = from_f<T>(x1[k]);
      dst[i + half] = from_f<T>(x2[k]);
    }
  }
}

template <typename T>
void launch(const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values,
            const at::Tensor& index, const at::Tensor& positions, const at::Tensor& inv_freq) {
  const auto layers = static_cast<int64_t>(keys.size());
  const int64_t heads = index.size(1), n = index.size(2), d = keys[0].size(-1);
  const int64_t head_stride = keys[0].stride(0);
  std::vector<int64_t> bases;
  for (const std::vector<at::Tensor>* side : {&keys, &values}) {
    for (const at::Tensor& t : *side) {
      if (t.dim() != 3 || t.size(0) != heads || t.size(-1) != d || t.stride(0) != head_stride ||
          t.stride(1) != d || t.stride(2) != 1 || t.scalar_type() != keys[0].scalar_type() ||
          t.device() != index.device()) {
        throw std::invalid_argument("compact_kv_: every layer's K and V must be [H, T, d] alike");
      }
      bases.push_back(reinterpret_cast<int64_t>(t.data_ptr()));
    }
  }
  if (n == 0) return;
  if (d % 2 != 0 || kThreads * kPairs % (d / 2) != 0)
    throw std::invalid_argument("compact_kv_: unsupported head dimension");
  const at::Tensor table = upload_indices(bases, index.device());
  const at::Tensor idx = index.contiguous();
  const at::Tensor pos = positions.to(at::kLong).contiguous();
  const at::Tensor freq = inv_freq.to(at::kFloat).contiguous();
  compact_kv_kernel<T><<<2 * layers * heads, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<T* const*>(table.data_ptr<int64_t>()), layers, heads, head_stride, n, d / 2,
      idx.data_ptr<int64_t>(), pos.data_ptr<int64_t>(), freq.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void compact_kv_cuda_(const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values,
                      const at::Tensor& index, const at::Tensor& positions,
                      const at::Tensor& inv_freq) {
  switch (keys.front().scalar_type()) {
    case at::kFloat:
      launch<float>(keys, values, index, positions, inv_freq);
      break;
    case at::kBFloat16:
      launch<__nv_bfloat16>(keys, values, index, positions, inv_freq);
      break;
    case at::kHalf:
      launch<__half>(keys, values, index, positions, inv_freq);
      break;
    default:
      throw std::invalid_argument("compact_kv_: K and V must be f32, bf16 or f16");
  }
}

}  // namespace engram::gpu
