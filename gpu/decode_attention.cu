#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>

#include "gpu/decode_attention.h"

namespace engram::gpu {
namespace {

constexpr int kChunk = 256;  // slots per block of the first kernel
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;  // 16-byte loads in flight per lane

struct Params {
  const void* q;
  const void* keys;
  const void* values;
  int64_t q_row, q_head;  // strides in elements (a head's d values are contiguous)
  int64_t k_row, k_head, v_row, v_head;
  const int64_t* key_positions;  // null: every slot up to the newest is seen
  int64_t kp_row;
  const bool* key_valid;  // null: every head sees every slot
  int64_t valid_row, valid_head;
  const int64_t* positions;
  const int64_t* last_slots;
  int hkv, g, splits;
  int64_t slots, window;
  float scale;
  float* part_acc;  // [R·Hkv, splits, g, d]: Σ exp(s - m) · v over the block's slots
  float* part_ml;   // [R·Hkv, splits, g, 2]: the block's max score m and Σ exp(s - m)
  void* out;        // [R, Hq, d]
};

__device__ inline void load_vec(const float* p, float* o) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  o[0] = v.x;
  o[1] = v.y;
  o[2] = v.z;
  o[3] = v.w;
}
__device__ inline void load_vec(const __nv_bfloat16* p, float* o) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    o[2 * i] = f.x;
    o[2 * i + 1] = f.y;
  }
}
__device__ inline void load_vec(const __half* p, float* o) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    o[2 * i] = f.x;
    o[2 * i + 1] = f.y;
  }
}
template <typename T>
__device__ T from_f(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __nv_bfloat16 from_f(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __half from_f(float v) {
  return __float2half(v);
}

// One block per (256 slots, row · KV head). A key row of d values is read by LPK lanes with one
// 16-byte load each; a warp reads KPW keys at a time. Scores of the block's g queries go to
// shared memory, become exp(s - m) there, and weight the values read the same way.
template <typename T, int D, int G>
__global__ void __launch_bounds__(kThreads) decode_partial_kernel(Params p) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr int LPK = D / VEC;
  constexpr int KPW = 32 / LPK;
  constexpr int GROUPS = kWarps * KPW;
  __shared__ float s_p[G][kChunk];
  __shared__ float s_red[kWarps][G][D];
  __shared__ float s_m[G], s_l[G];

  const int split = blockIdx.x, rh = blockIdx.y;
  const int row = rh / p.hkv, head = rh % p.hkv, g = p.g;
  const int64_t start = static_cast<int64_t>(split) * kChunk;
  const int64_t newest = p.last_slots[row];
  const int64_t end = newest + 1 < p.slots ? newest + 1 : p.slots;
  const int64_t avail = end - start;
  const int n = avail <= 0 ? 0 : avail < kChunk ? static_cast<int>(avail) : kChunk;
  float* ml = p.part_ml + (static_cast<int64_t>(rh) * p.splits + split) * g * 2;
  float* acc_out = p.part_acc + (static_cast<int64_t>(rh) * p.splits + split) * g * D;
  if (n == 0) {  // past the row's newest slot: nothing read, nothing weighs in the combine
    if (threadIdx.x < g) {
      ml[2 * threadIdx.x] = -INFINITY;
      ml[2 * threadIdx.x + 1] = 0.f;
    }
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % LPK, kg = warp * KPW + lane / LPK;

  float qr[G][VEC];
  const T* qp =
      static_cast<const T*>(p.q) + row * p.q_row + static_cast<int64_t>(head) * g * p.q_head;
#pragma unroll
  for (int qi = 0; qi < G; ++qi) {
    if (qi < g) {
      load_vec(qp + qi * p.q_head + sub * VEC, qr[qi]);
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        qr[qi][e] *= p.scale;
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        qr[qi][e] = 0.f;
    }
  }
  const int64_t pos = p.positions[row];
  const int64_t* kpos = p.key_positions ? p.key_positions + row * p.kp_row + start : nullptr;
  const bool* kvalid =
      p.key_valid ? p.key_valid + row * p.valid_row + head * p.valid_head + start : nullptr;
  const T* kbase = static_cast<const T*>(p.keys) + row * p.k_row + head * p.k_head + start * D;

  for (int base = 0; base < n; base += GROUPS * kUnroll) {
    float kv[kUnroll][VEC];
    bool seen[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * GROUPS + kg;
      seen[u] = j < n;
      if (seen[u]) {
        load_vec(kbase + static_cast<int64_t>(j) * D + sub * VEC, kv[u]);
        if (sub == 0) {
          if (kpos) {
            const int64_t kp = kpos[j];
            seen[u] = kp >= 0 && kp <= pos && (p.window <= 0 || kp > pos - p.window);
          }
          if (kvalid) seen[u] = seen[u] && kvalid[j];
        }
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          kv[u][e] = 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * GROUPS + kg;
#pragma unroll
      for (int qi = 0; qi < G; ++qi) {
        if (qi >= g) break;  // g is the same in every lane: the shuffles stay converged
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          s = fmaf(qr[qi][e], kv[u][e], s);
#pragma unroll
        for (int off = LPK / 2; off > 0; off /= 2)
          s += __shfl_xor_sync(0xffffffffu, s, off);
        if (sub == 0 && j < n) s_p[qi][j] = seen[u] ? s : -INFINITY;
      }
    }
  }
  __syncthreads();

  for (int qi = warp; qi < g; qi += kWarps) {
    float m = -INFINITY;
    for (int j = lane; j < n; j += 32)
      m = fmaxf(m, s_p[qi][j]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    float l = 0.f;
    for (int j = lane; j < n; j += 32) {
      const float e = m == -INFINITY ? 0.f : expf(s_p[qi][j] - m);
      s_p[qi][j] = e;
      l += e;
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
      l += __shfl_xor_sync(0xffffffffu, l, off);
    if (lane == 0) {
      s_m[qi] = m;
      s_l[qi] = l;
    }
  }
  __syncthreads();

  float acc[G][VEC];
#pragma unroll
  for (int qi = 0; qi < G; ++qi)
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      acc[qi][e] = 0.f;
  const T* vbase = static_cast<const T*>(p.values) + row * p.v_row + head * p.v_head + start * D;
  for (int base = 0; base < n; base += GROUPS * kUnroll) {
    float vv[kUnroll][VEC];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * GROUPS + kg;
      if (j < n) load_vec(vbase + static_cast<int64_t>(j) * D + sub * VEC, vv[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * GROUPS + kg;
      if (j >= n) continue;
#pragma unroll
      for (int qi = 0; qi < G; ++qi) {
        if (qi >= g) break;
        const float w = s_p[qi][j];
        if (w == 0.f) continue;  // an unseen slot adds nothing, whatever it holds
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          acc[qi][e] = fmaf(w, vv[u][e], acc[qi][e]);
      }
    }
  }
  // Lanes holding the same slice of d differ by multiples of LPK: sum them, then over warps.
#pragma unroll
  for (int off = LPK; off < 32; off *= 2)
#pragma unroll
    for (int qi = 0; qi < G; ++qi)
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        acc[qi][e] += __shfl_xor_sync(0xffffffffu, acc[qi][e], off);
  if (lane < LPK) {
#pragma unroll
    for (int qi = 0; qi < G; ++qi)
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        s_red[warp][qi][sub * VEC + e] = acc[qi][e];
  }
  __syncthreads();
  for (int t = threadIdx.x; t < g * D; t += kThreads) {
    const int qi = t / D, dd = t % D;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      sum += s_red[w][qi][dd];
    acc_out[t] = sum;
  }
  if (threadIdx.x < g) {
    ml[2 * threadIdx.x] = s_m[threadIdx.x];
    ml[2 * threadIdx.x + 1] = s_l[threadIdx.x];
  }
}

// One block per (row · KV head, query head of its group), one thread per element of d: the
// blocks' partial softmaxes rescaled to the largest max.
template <typename T, int D>
__global__ void decode_combine_kernel(Params p) {
  const int g = p.g, rh = blockIdx.x / g, qi = blockIdx.x % g, d = threadIdx.x;
  const float* ml = p.part_ml + static_cast<int64_t>(rh) * p.splits * g * 2;
  const float* acc = p.part_acc + static_cast<int64_t>(rh) * p.splits * g * D;
  float m = -INFINITY;
  for (int s = 0; s < p.splits; ++s)
    m = fmaxf(m, ml[(s * g + qi) * 2]);
  float l = 0.f, a = 0.f;
  if (m != -INFINITY) {
    for (int s = 0; s < p.splits; ++s) {
      const float ls = ml[(s * g + qi) * 2 + 1];
      if (ls > 0.f) {
        const float w = expf(ml[(s * g + qi) * 2] - m);
        l = fmaf(w, ls, l);
        a = fmaf(w, acc[(static_cast<int64_t>(s) * g + qi) * D + d], a);
      }
    }
  }
  static_cast<T*>(p.out)[(static_cast<int64_t>(rh) * g + qi) * D + d] =
      from_f<T>(l > 0.f ? a / l : 0.f);
}

template <typename T, int D, int G>
void launch(const Params& p, int64_t rows) {
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  decode_partial_kernel<T, D, G>
      <<<dim3(p.splits, static_cast<unsigned>(rows * p.hkv)), kThreads, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  decode_combine_kernel<T, D><<<static_cast<unsigned>(rows * p.hkv * p.g), D, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, int D>
void launch_g(const Params& p, int64_t rows) {
  if (p.g <= 4) {
    launch<T, D, 4>(p, rows);
  } else {
    launch<T, D, 8>(p, rows);
  }
}

template <typename T>
void launch_d(const Params& p, int64_t rows, int64_t d) {
  if (d == 64) {
    launch_g<T, 64>(p, rows);
  } else if (d == 128) {
    launch_g<T, 128>(p, rows);
  } else if constexpr (sizeof(T) == 2) {
    launch_g<T, 256>(p, rows);
  } else {
    throw std::invalid_argument("decode_attention: f32 takes head_dim 64 or 128");
  }
}

}  // namespace

at::Tensor decode_attention_cuda(const at::Tensor& q_in, const at::Tensor& keys,
                                 const at::Tensor& values, const at::Tensor& key_positions,
                                 const at::Tensor& key_valid, const at::Tensor& positions,
                                 const at::Tensor& last_slots, int64_t window, double scale) {
  const at::Tensor q = q_in.contiguous();
  const at::Tensor pos = positions.reshape({-1}).contiguous();
  const at::Tensor last = last_slots.reshape({-1}).contiguous();
  const int64_t rows = q.size(0), hq = q.size(1), d = q.size(2);
  const int64_t hkv = keys.size(1), slots = keys.size(2);
  at::Tensor out = at::empty({rows, hq, d}, q.options());
  if (rows == 0) return out;
  if (slots == 0) return out.zero_();
  Params p{};
  p.g = static_cast<int>(hq / hkv);
  p.hkv = static_cast<int>(hkv);
  p.splits = static_cast<int>((slots + kChunk - 1) / kChunk);
  const auto f32 = q.options().dtype(at::kFloat);
  at::Tensor part_acc = at::empty({rows * hkv, p.splits, p.g, d}, f32);
  at::Tensor part_ml = at::empty({rows * hkv, p.splits, p.g, 2}, f32);
  p.q = q.data_ptr();
  p.q_row = q.stride(0);
  p.q_head = q.stride(1);
  p.keys = keys.data_ptr();
  p.k_row = keys.stride(0);
  p.k_head = keys.stride(1);
  p.values = values.data_ptr();
  p.v_row = values.stride(0);
  p.v_head = values.stride(1);
  if (key_positions.defined()) {
    p.key_positions = key_positions.data_ptr<int64_t>();
    p.kp_row = key_positions.stride(0);
  }
  if (key_valid.defined()) {
    p.key_valid = key_valid.data_ptr<bool>();
    p.valid_row = key_valid.stride(0);
    p.valid_head = key_valid.stride(1);
  }
  p.positions = pos.data_ptr<int64_t>();
  p.last_slots = last.data_ptr<int64_t>();
  p.slots = slots;
  p.window = window;
  p.scale = static_cast<float>(scale);
  p.part_acc = part_acc.data_ptr<float>();
  p.part_ml = part_ml.data_ptr<float>();
  p.out = out.data_ptr();
  switch (q.scalar_type()) {
    case at::kFloat:
      launch_d<float>(p, rows, d);
      break;
    case at::kBFloat16:
      launch_d<__nv_bfloat16>(p, rows, d);
      break;
    case at::kHalf:
      launch_d<__half>(p, rows, d);
      break;
    default:
      throw std::invalid_argument("decode_attention: q must be f32, bf16 or f16");
  }
  return out;
}

}  // namespace engram::gpu
