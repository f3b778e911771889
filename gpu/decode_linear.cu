#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gpu/decode_linear.h"
#include "gpu/float_convert.cuh"

namespace engram::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

// Weights are read once: past L1, without allocating in it (the input rows stay there).
__device__ inline uint4 load_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// One warp per output feature n (grid-stride): lane l takes the 16-byte chunks l, l + 32, ...
// of W's row n, kUnroll of them loaded before any is used, and accumulates each of the R input
// rows' products in f32; a butterfly sums the lanes.
template <typename T, int R>
__global__ void __launch_bounds__(kThreads)
    decode_linear_kernel(const T* __restrict__ x, const T* __restrict__ w,
                         const T* __restrict__ bias, T* __restrict__ y, int rows, int64_t n,
                         int64_t k) {
  const int lane = threadIdx.x % 32;
  const int64_t chunks = k / 8;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; row < n;
       row += warps) {
    const uint4* wrow = reinterpret_cast<const uint4*>(w + row * k);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
      acc[r] = 0.f;
    int64_t c = lane;
    for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
      uint4 wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        wv[u] = load_stream(wrow + c + 32 * u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float wf[8];
        widen8(wv[u], w, wf);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r >= rows) break;
          float xf[8];
          widen8(__ldg(reinterpret_cast<const uint4*>(x + r * k) + c + 32 * u), x, xf);
#pragma unroll
          for (int e = 0; e < 8; ++e)
            acc[r] = fmaf(wf[e], xf[e], acc[r]);
        }
      }
    }
    for (; c < chunks; c += 32) {
      float wf[8];
      widen8(load_stream(wrow + c), w, wf);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= rows) break;
        float xf[8];
        widen8(__ldg(reinterpret_cast<const uint4*>(x + r * k) + c), x, xf);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[r] = fmaf(wf[e], xf[e], acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    }
    if (lane == 0) {
      const float b = bias ? to_f(bias[row]) : 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (r < rows) y[r * n + row] = from_f<T>(acc[r] + b);
    }
  }
}

template <typename T, int R>
void launch(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, at::Tensor& y) {
  const int64_t n = w.size(0), k = w.size(1);
  // Enough warps to keep every SM's loads in flight; rows beyond them are grid-strided.
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t blocks = std::min<int64_t>((n + kWarps - 1) / kWarps, sms * 16);
  decode_linear_kernel<T, R><<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const T*>(x.data_ptr()), reinterpret_cast<const T*>(w.data_ptr()),
      bias.defined() ? reinterpret_cast<const T*>(bias.data_ptr()) : nullptr,
      reinterpret_cast<T*>(y.data_ptr()), static_cast<int>(x.size(0)), n, k);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void launch_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, at::Tensor& y) {
  const int64_t rows = x.size(0);
  if (rows == 1) {
    launch<T, 1>(x, w, bias, y);
  } else if (rows == 2) {
    launch<T, 2>(x, w, bias, y);
  } else if (rows <= 4) {
    launch<T, 4>(x, w, bias, y);
  } else {
    launch<T, 8>(x, w, bias, y);
  }
}

}  // namespace

at::Tensor decode_linear_cuda(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  at::Tensor y = at::empty({x.size(0), w.size(0)}, x.options());
  if (x.scalar_type() == at::kBFloat16) {
    launch_rows<__nv_bfloat16>(x, w, bias, y);
  } else {
    launch_rows<__half>(x, w, bias, y);
  }
  return y;
}

}  // namespace engram::gpu
