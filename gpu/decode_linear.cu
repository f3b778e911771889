#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "gpu/decode_linear.h"
#include "gpu/dependent_launch.cuh"
#include "gpu/float_convert.cuh"
#include "gpu/rms_norm_row.cuh"
#include "gpu/silu_times.cuh"

namespace engram::gpu {
namespace {

constexpr int kThreads = kRmsNormThreads;  // the fused norm reduces as gpu::rms_norm
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane
// Bytes of each warp's first weight row prefetched before the previous kernel ends: its first
// two rounds of loads (the whole rows would be ~25 MB of L2 for the 3B qkv).
constexpr int64_t kPrefetchBytes = 2 * 32 * kUnroll * 16;

// Weights are read once: past L1, without allocating in it (the input rows stay there).
__device__ inline uint4 load_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

template <typename T>
struct Args {
  const T* x;         // [rows, k]
  const T* w;         // [n, k]
  const T* bias;      // [n] or null
  const T* norm_w;    // [k] or null (kNorm)
  const T* residual;  // [rows, outputs] or null
  T* y;               // [rows, outputs]
  int rows;
  int64_t outputs;  // n, or glu_inter
  int64_t k;
  int64_t glu_inter;  // 0: plain
  float eps;
};

// acc[r] += the lane's share of W row · x row r: lane l takes the 16-byte chunks l, l + 32, ... of
// the weight row, kUnroll of them loaded before any is used; x's rows come from shared memory
// (kSharedX, the normalized copy) or through the read-only cache.
template <typename T, int R, bool kSharedX>
__device__ inline void dot_rows(const uint4* wrow, const T* x, int rows, int64_t k, int lane,
                                float (&acc)[R]) {
  const int64_t chunks = k / 8;
  const auto x_chunk = [&](int r, int64_t c) {
    const uint4* p = reinterpret_cast<const uint4*>(x + r * k) + c;
    if constexpr (kSharedX) {
      return *p;
    } else {
      return __ldg(p);
    }
  };
  int64_t c = lane;
  for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      wv[u] = load_stream(wrow + c + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float wf[8];
      widen8(wv[u], x, wf);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= rows) break;
        float xf[8];
        widen8(x_chunk(r, c + 32 * u), x, xf);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[r] = fmaf(wf[e], xf[e], acc[r]);
      }
    }
  }
  for (; c < chunks; c += 32) {
    float wf[8];
    widen8(load_stream(wrow + c), x, wf);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;
      float xf[8];
      widen8(x_chunk(r, c), x, xf);
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
}

// One warp per output feature (grid-stride), the R input rows' products in f32 registers. kNorm:
// every block first writes the rows' RMSNorm to shared memory (the reduction of gpu::rms_norm's
// kernel, so the same bits). With glu_inter the warp takes the gate row and the up row of its
// feature and stores silu(gate)·up; a residual is added last, each step rounded where the separate
// ops round.
template <typename T, int R, bool kNorm>
__global__ void __launch_bounds__(kThreads) decode_linear_kernel(Args<T> a) {
  extern __shared__ uint4 normed_x[];
  const int lane = threadIdx.x % 32;
  // Launched dependent (gpu/dependent_launch.cuh): the start of the warp's first weight row is
  // fetched into L2 while the kernel before still runs; x, the residual and y wait for it.
  allow_dependents();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (first < a.outputs) {
    const char* row = reinterpret_cast<const char*>(a.w + first * a.k);
    const int64_t row_bytes = a.k * static_cast<int64_t>(sizeof(T));
    const int64_t bytes = row_bytes < kPrefetchBytes ? row_bytes : kPrefetchBytes;
    for (int64_t byte = lane * 128; byte < bytes; byte += 32 * 128)
      prefetch_l2(row + byte);
  }
  wait_for_previous();
  const T* x = a.x;
  if constexpr (kNorm) {
    T* xn = reinterpret_cast<T*>(normed_x);
    for (int r = 0; r < a.rows; ++r)
      rms_norm_row_vec<T>(a.x + r * a.k, a.norm_w, xn + r * a.k, a.k, a.eps);
    __syncthreads();
    x = xn;
  }
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t out = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; out < a.outputs;
       out += warps) {
    float acc[R], up[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
      acc[r] = up[r] = 0.f;
    dot_rows<T, R, kNorm>(reinterpret_cast<const uint4*>(a.w + out * a.k), x, a.rows, a.k, lane,
                          acc);
    if (a.glu_inter > 0)
      dot_rows<T, R, kNorm>(reinterpret_cast<const uint4*>(a.w + (out + a.glu_inter) * a.k), x,
                            a.rows, a.k, lane, up);
    if (lane != 0) continue;
    const float b = a.bias ? to_f(a.bias[out]) : 0.f;
    const float b_up = a.bias && a.glu_inter > 0 ? to_f(a.bias[out + a.glu_inter]) : 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= a.rows) break;
      T v = a.glu_inter > 0 ? silu_times<T>(rounded<T>(acc[r] + b), rounded<T>(up[r] + b_up))
                            : from_f<T>(acc[r] + b);
      if (a.residual) v = from_f<T>(to_f(v) + to_f(a.residual[r * a.outputs + out]));
      a.y[r * a.outputs + out] = v;
    }
  }
}

template <typename T, int R>
void launch(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
            const DecodeLinearFusion& f, at::Tensor& y) {
  const auto ptr = [](const at::Tensor& t) {
    return t.defined() ? reinterpret_cast<const T*>(t.data_ptr()) : nullptr;
  };
  Args<T> a{ptr(x),
            ptr(w),
            ptr(bias),
            ptr(f.norm_weight),
            ptr(f.residual),
            reinterpret_cast<T*>(y.data_ptr()),
            static_cast<int>(x.size(0)),
            y.size(1),
            w.size(1),
            f.glu_inter,
            static_cast<float>(f.norm_eps)};
  // Enough warps to keep every SM's loads in flight; features beyond them are grid-strided.
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t blocks = std::min<int64_t>((a.outputs + kWarps - 1) / kWarps, sms * 16);
  const auto stream = at::cuda::getCurrentCUDAStream();
  if (f.norm_weight.defined()) {
    const size_t shared = static_cast<size_t>(a.rows * a.k) * sizeof(T);
    C10_CUDA_CHECK(launch_dependent(decode_linear_kernel<T, R, true>, dim3(blocks), dim3(kThreads),
                                    shared, stream, a));
  } else {
    C10_CUDA_CHECK(launch_dependent(decode_linear_kernel<T, R, false>, dim3(blocks), dim3(kThreads),
                                    0, stream, a));
  }
}

template <typename T>
void launch_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                 const DecodeLinearFusion& f, at::Tensor& y) {
  const int64_t rows = x.size(0);
  if (rows == 1) {
    launch<T, 1>(x, w, bias, f, y);
  } else if (rows == 2) {
    launch<T, 2>(x, w, bias, f, y);
  } else if (rows <= 4) {
    launch<T, 4>(x, w, bias, f, y);
  } else {
    launch<T, 8>(x, w, bias, f, y);
  }
}

}  // namespace

at::Tensor decode_linear_cuda(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                              const DecodeLinearFusion& fusion) {
  const int64_t outputs = fusion.glu_inter > 0 ? fusion.glu_inter : w.size(0);
  at::Tensor y = at::empty({x.size(0), outputs}, x.options());
  if (x.scalar_type() == at::kBFloat16) {
    launch_rows<__nv_bfloat16>(x, w, bias, fusion, y);
  } else {
    launch_rows<__half>(x, w, bias, fusion, y);
  }
  return y;
}

}  // namespace engram::gpu
