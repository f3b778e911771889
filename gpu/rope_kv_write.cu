#include "gpu/float_convert.cuh"
#include "gpu/rope_kv_write.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>

namespace engram::gpu {
namespace {

// x·cos + rotate_half(x)·sin rounded where the torch expression rounds (rope_element).
template <typename T>
__device__ T rotated(const T* row, const T* cos, const T* sin, int64_t j, int64_t half) {
  const float partner = j < half ? -to_f(row[j + half]) : to_f(row[j - half]);
  return rope_element<T>(to_f(row[j]), partner, to_f(cos[j]), to_f(sin[j]));
}

// One thread per element of the hq + 2·hkv rows: q rows rotate into q_out, k rows rotate into
// the key cache at the slot, v rows copy into the value cache at the slot.
template <typename T>
__global__ void rope_kv_write_kernel(const T* q, const T* k, const T* v, const T* cos, const T* sin,
                                     const int64_t* slot, T* q_out, T* key_cache, T* value_cache,
                                     int64_t hq, int64_t hkv, int64_t d, int64_t capacity) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= (hq + 2 * hkv) * d) return;
  const int64_t row = idx / d, j = idx % d, half = d / 2;
  if (row < hq) {
    q_out[idx] = rotated(q + row * d, cos, sin, j, half);
    return;
  }
  const int64_t s = *slot;
  if (row < hq + hkv) {
    const int64_t h = row - hq;
    key_cache[(h * capacity + s) * d + j] = rotated(k + h * d, cos, sin, j, half);
  } else {
    const int64_t h = row - hq - hkv;
    value_cache[(h * capacity + s) * d + j] = v[h * d + j];
  }
}

template <typename T>
void launch(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cos,
            const at::Tensor& sin, const at::Tensor& slot, at::Tensor& q_out, at::Tensor& key_cache,
            at::Tensor& value_cache) {
  const int64_t hq = q.size(0), hkv = k.size(0), d = q.size(1), capacity = key_cache.size(1);
  const int64_t work = (hq + 2 * hkv) * d;
  const int threads = 256;
  const int64_t blocks = (work + threads - 1) / threads;
  rope_kv_write_kernel<T><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const T*>(q.data_ptr()), reinterpret_cast<const T*>(k.data_ptr()),
      reinterpret_cast<const T*>(v.data_ptr()), reinterpret_cast<const T*>(cos.data_ptr()),
      reinterpret_cast<const T*>(sin.data_ptr()), slot.data_ptr<int64_t>(),
      reinterpret_cast<T*>(q_out.data_ptr()), reinterpret_cast<T*>(key_cache.data_ptr()),
      reinterpret_cast<T*>(value_cache.data_ptr()), hq, hkv, d, capacity);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void rope_kv_write_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& slot,
                        at::Tensor& q_out, at::Tensor& key_cache, at::Tensor& value_cache) {
  const auto dtype = q.scalar_type();
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&k, &v, &cos, &sin, &q_out,
                                                                      &key_cache, &value_cache}) {
    if (t->scalar_type() != dtype) throw std::invalid_argument("rope_kv_write: mixed dtypes");
  }
  if (slot.scalar_type() != at::kLong) throw std::invalid_argument("rope_kv_write: slot int64");
  switch (dtype) {
    case at::kFloat:
      launch<float>(q, k, v, cos, sin, slot, q_out, key_cache, value_cache);
      break;
    case at::kBFloat16:
      launch<__nv_bfloat16>(q, k, v, cos, sin, slot, q_out, key_cache, value_cache);
      break;
    case at::kHalf:
      launch<__half>(q, k, v, cos, sin, slot, q_out, key_cache, value_cache);
      break;
    default:
      throw std::invalid_argument("rope_kv_write: f32, bf16 or f16 expected");
  }
}

}  // namespace engram::gpu
