#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>

#include "gpu/decode_attention.h"
#include "gpu/dependent_launch.cuh"
#include "gpu/env_flag.h"
#include "gpu/float_convert.cuh"

namespace engram::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

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
  bool interleaved;  // the peer: split s takes tiles s, s + splits, ...
                     // (ENGRAM_DECODE_ATTENTION_INTERLEAVED)
  int64_t slots, window;
  float scale;
  float* part_acc;  // [R·Hkv, splits, g, d]: Σ exp(s - m) · v over the block's slots
  float* part_ml;   // [R·Hkv, splits, g, 2]: the block's max score m and Σ exp(s - m)
  void* out;        // [R, Hq, d]
};

__device__ inline void load_vec(const float* p, float* o) {  // f32: four at a time
  load4(p, o);
}
template <typename T>
__device__ inline void load_vec(const T* p, float* o) {  // bf16 / f16: eight at a time
  widen8(*reinterpret_cast<const uint4*>(p), p, o);
}

// Slots per block: a block's keys and values are one 16 KiB tile each in shared memory.
constexpr int kTileBytes = 16384;
template <typename T, int D>
__host__ __device__ constexpr int chunk_slots() {
  return kTileBytes / (D * static_cast<int>(sizeof(T)));
}

__device__ inline void copy16_async(void* smem, const void* global) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global));
}
__device__ inline void async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ inline void async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <typename T, int D, int G>
constexpr size_t partial_smem_bytes() {
  constexpr int C = chunk_slots<T, D>();
  return 2 * kTileBytes + (G * C + 3 * G) * sizeof(float) + 2 * C;
}

// One block per (split, row · KV head); split s takes the s-th of `splits` equal runs of the
// row's slots up to its newest, read on the device (so the capacity past them costs no block its
// share, and the runs differ by a slot at most: whole tiles dealt out in turn left a fifth
// of the blocks a fourth tile at an episode's 10K slots, and those set the time). A tile's keys and
// values are copied into shared memory asynchronously (cp.async: every byte in flight at once, none
// held in registers), and the next tile's copies are issued as soon as this one's buffer is read:
// its keys once the scores are written, its values once the weighted sum is done, so a block always
// has a copy in flight behind its arithmetic (no second buffer: four or five blocks still fit an
// SM). A key row of d values is read by LPK lanes, 16 bytes each; a warp takes KPW keys at a time.
// The block keeps an online softmax over its tiles (running max and sum per query, the weighted
// values rescaled when the max grows), as flash-decoding does.
template <typename T, int D, int G>
__global__ void __launch_bounds__(kThreads) decode_partial_kernel(Params p) {
  constexpr int VEC = 16 / sizeof(T);
  constexpr int LPK = D / VEC;
  constexpr int KPW = 32 / LPK;
  constexpr int GROUPS = kWarps * KPW;
  constexpr int C = chunk_slots<T, D>();
  constexpr int PIECES = D / VEC;  // 16-byte pieces per slot
  static_assert(kWarps * G * D * sizeof(float) <= 2 * kTileBytes, "s_red fits over the tiles");
  static_assert(C <= kThreads, "a tile's slot flags are one per thread");
  extern __shared__ __align__(16) unsigned char smem[];
  T* k_tile = reinterpret_cast<T*>(smem);
  T* v_tile = reinterpret_cast<T*>(smem + kTileBytes);
  float* s_p = reinterpret_cast<float*>(smem + 2 * kTileBytes);  // [G][C]
  float* s_m = s_p + G * C;                                      // running max per query
  float* s_l = s_m + G;                                          // running sum
  float* s_scale = s_l + G;                                      // this tile's rescale
  bool* s_seen_buf = reinterpret_cast<bool*>(s_scale + G);       // [2][C]: this tile, the next
  float* s_red = reinterpret_cast<float*>(smem);  // [kWarps][G][D], over the read tiles
  allow_dependents();  // the combine may be scheduled now; it waits for these partials

  const int split = blockIdx.x, rh = blockIdx.y;
  const int row = rh / p.hkv, head = rh % p.hkv, g = p.g;
  const int64_t newest = p.last_slots[row];
  const int64_t end = newest + 1 < p.slots ? newest + 1 : p.slots;
  const int64_t pos = p.positions[row];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % LPK, kg = warp * KPW + lane / LPK;
  // [first, limit) in steps of `stride`: a balanced run, or the interleaved peer's tiles.
  const int64_t first = p.interleaved ? static_cast<int64_t>(split) * C : end * split / p.splits;
  const int64_t limit = p.interleaved ? end : end * (split + 1) / p.splits;
  const int64_t stride = p.interleaved ? static_cast<int64_t>(p.splits) * C : C;
  const T* k_head = static_cast<const T*>(p.keys) + row * p.k_row + head * p.k_head;
  const T* v_head = static_cast<const T*>(p.values) + row * p.v_row + head * p.v_head;
  const auto tile_slots = [&](int64_t start) {
    return limit - start < C ? static_cast<int>(limit - start) : C;
  };
  const auto copy_tile = [&](T* tile, const T* base, int64_t start) {
    const int n = tile_slots(start);
    for (int i = threadIdx.x; i < n * PIECES; i += kThreads)
      copy16_async(tile + i * VEC, base + start * D + i * VEC);
  };
  // This thread's slot of a tile (a tile has at most kThreads slots: one flag per thread): its
  // key position and valid flag are loaded well before the flag is needed, so the loads' latency
  // hides behind the tile in hand (the comparison waits for them: it comes last).
  struct SlotFlags {
    int64_t position = 0;
    bool valid = true;
  };
  const auto load_flags = [&](int64_t start) {
    const int64_t j = start + threadIdx.x;
    SlotFlags f;
    if (p.key_positions) f.position = p.key_positions[row * p.kp_row + j];
    if (p.key_valid) f.valid = p.key_valid[row * p.valid_row + head * p.valid_head + j];
    return f;
  };
  const auto seen_of = [&](const SlotFlags& f) {
    const bool in_view = !p.key_positions || (f.position >= 0 && f.position <= pos &&
                                              (p.window <= 0 || f.position > pos - p.window));
    return in_view && f.valid;
  };
  if (threadIdx.x < G) {
    s_m[threadIdx.x] = -INFINITY;
    s_l[threadIdx.x] = 0.f;
    s_scale[threadIdx.x] = 0.f;
  }
  // The first tile's copies go out before anything else (two groups: keys, then values).
  int64_t start = first;
  if (start < limit) copy_tile(k_tile, k_head, start);
  async_commit();
  if (start < limit) copy_tile(v_tile, v_head, start);
  async_commit();
  if (start < limit && threadIdx.x < tile_slots(start))
    s_seen_buf[threadIdx.x] = seen_of(load_flags(start));
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
  float acc[G][VEC];
#pragma unroll
  for (int qi = 0; qi < G; ++qi)
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      acc[qi][e] = 0.f;

  for (int parity = 0; start < limit; start += stride, parity ^= 1) {
    const int n = tile_slots(start);
    const int64_t next = start + stride;
    const bool* s_seen = s_seen_buf + parity * C;
    // Groups in flight here: this tile's keys, then its values.
    async_wait<1>();  // the keys
    __syncthreads();

    // Two keys per lane and pass, all G queries at once (rows past g hold zero queries and are
    // never read): 2·G independent dot products and shuffle chains, no branch between them.
    for (int j0 = 0; j0 < n; j0 += 2 * GROUPS) {  // the bound is the same in every lane
      const int ja = j0 + kg, jb = ja + GROUPS;
      float ka[VEC], kb[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        ka[e] = kb[e] = 0.f;
      if (ja < n) load_vec(k_tile + ja * D + sub * VEC, ka);
      if (jb < n) load_vec(k_tile + jb * D + sub * VEC, kb);
      float sa[G], sb[G];
#pragma unroll
      for (int qi = 0; qi < G; ++qi) {
        float a0 = 0.f, a1 = 0.f, b0 = 0.f, b1 = 0.f;
#pragma unroll
        for (int e = 0; e < VEC; e += 2) {
          a0 = fmaf(qr[qi][e], ka[e], a0);
          a1 = fmaf(qr[qi][e + 1], ka[e + 1], a1);
          b0 = fmaf(qr[qi][e], kb[e], b0);
          b1 = fmaf(qr[qi][e + 1], kb[e + 1], b1);
        }
        sa[qi] = a0 + a1;
        sb[qi] = b0 + b1;
      }
#pragma unroll
      for (int off = LPK / 2; off > 0; off /= 2) {
#pragma unroll
        for (int qi = 0; qi < G; ++qi) {
          sa[qi] += __shfl_xor_sync(0xffffffffu, sa[qi], off);
          sb[qi] += __shfl_xor_sync(0xffffffffu, sb[qi], off);
        }
      }
      if (sub == 0) {
#pragma unroll
        for (int qi = 0; qi < G; ++qi) {
          if (ja < n) s_p[qi * C + ja] = s_seen[ja] ? sa[qi] : -INFINITY;
          if (jb < n) s_p[qi * C + jb] = s_seen[jb] ? sb[qi] : -INFINITY;
        }
      }
    }
    __syncthreads();  // the key tile is read: the next tile's keys may land in it
    if (next < limit) copy_tile(k_tile, k_head, next);
    async_commit();
    const bool next_mine = next < limit && threadIdx.x < tile_slots(next);
    const SlotFlags next_flags = next_mine ? load_flags(next) : SlotFlags{};

    for (int qi = warp; qi < g; qi += kWarps) {
      float m = -INFINITY;
      for (int j = lane; j < n; j += 32)
        m = fmaxf(m, s_p[qi * C + j]);
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
      const float m_old = s_m[qi], m_new = fmaxf(m_old, m);
      float l = 0.f;
      for (int j = lane; j < n; j += 32) {
        const float e = m_new == -INFINITY ? 0.f : expf(s_p[qi * C + j] - m_new);
        s_p[qi * C + j] = e;
        l += e;
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        l += __shfl_xor_sync(0xffffffffu, l, off);
      __syncwarp();
      if (lane == 0) {
        const float rescale = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
        s_scale[qi] = rescale;
        s_l[qi] = s_l[qi] * rescale + l;
        s_m[qi] = m_new;
      }
    }
    // In flight: this tile's values, then the next tile's keys.
    async_wait<1>();  // the values
    __syncthreads();

#pragma unroll
    for (int qi = 0; qi < G; ++qi) {
      const float rescale = s_scale[qi];
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        acc[qi][e] *= rescale;
    }
    // An unseen slot adds nothing, whatever it holds: skipped whole (the flag is per KV head,
    // the same for every query of the group).
    for (int j = kg; j < n; j += GROUPS) {
      if (!s_seen[j]) continue;
      float vv[VEC], w[G];
      load_vec(v_tile + j * D + sub * VEC, vv);
#pragma unroll
      for (int qi = 0; qi < G; ++qi)
        w[qi] = s_p[qi * C + j];
#pragma unroll
      for (int qi = 0; qi < G; ++qi)
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          acc[qi][e] = fmaf(w[qi], vv[e], acc[qi][e]);
    }
    __syncthreads();  // the value tile, the scores and these flags are read
    if (next < limit) copy_tile(v_tile, v_head, next);
    async_commit();
    if (next_mine) s_seen_buf[(parity ^ 1) * C + threadIdx.x] = seen_of(next_flags);
  }
  async_wait<0>();  // nothing may land in the tiles once they hold the reduction
  __syncthreads();

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
        s_red[(warp * G + qi) * D + sub * VEC + e] = acc[qi][e];
  }
  __syncthreads();
  float* ml = p.part_ml + (static_cast<int64_t>(rh) * p.splits + split) * g * 2;
  float* acc_out = p.part_acc + (static_cast<int64_t>(rh) * p.splits + split) * g * D;
  for (int t = threadIdx.x; t < g * D; t += kThreads) {
    const int qi = t / D, dd = t % D;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      sum += s_red[(w * G + qi) * D + dd];
    acc_out[t] = sum;
  }
  if (threadIdx.x < g) {
    ml[2 * threadIdx.x] = s_m[threadIdx.x];
    ml[2 * threadIdx.x + 1] = s_l[threadIdx.x];
  }
}

// One block per (row · KV head, query head of its group): the splits' partial softmaxes rescaled
// to the largest max. Every load is independent of the others, so they are all in flight at once
// (the partials sit in L2): first each split's (max, sum) by one thread, then each warp a share
// of the splits' weighted values, a lane D / 32 contiguous elements of d, summed across warps.
constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;
template <typename T, int D>
__global__ void __launch_bounds__(kCombineThreads) decode_combine_kernel(Params p) {
  constexpr int PER_LANE = D / 32;  // 2, 4 or 8 contiguous elements
  __shared__ float s_red[kCombineWarps];
  __shared__ float s_acc[kCombineWarps][D];
  extern __shared__ float s_w[];  // [splits]: each split's weight exp(m_s - m)
  allow_dependents();             // the next projection's weights may start streaming
  wait_for_previous();            // launched dependent on the partials (gpu/dependent_launch.cuh)
  const int g = p.g, rh = blockIdx.x / g, qi = blockIdx.x % g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* ml = p.part_ml + static_cast<int64_t>(rh) * p.splits * g * 2;
  const float* acc = p.part_acc + static_cast<int64_t>(rh) * p.splits * g * D;
  const auto block_reduce = [&](float v, bool is_max) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, v, off);
      v = is_max ? fmaxf(v, o) : v + o;
    }
    if (lane == 0) s_red[warp] = v;
    __syncthreads();
    float r = s_red[0];
#pragma unroll
    for (int w = 1; w < kCombineWarps; ++w)
      r = is_max ? fmaxf(r, s_red[w]) : r + s_red[w];
    __syncthreads();  // s_red is free again
    return r;
  };
  float m = -INFINITY;
  for (int s = threadIdx.x; s < p.splits; s += kCombineThreads)
    m = fmaxf(m, ml[(s * g + qi) * 2]);
  m = block_reduce(m, true);
  // A split that saw no key has max -inf and sum 0: weight 0 (and so does every split when the
  // row saw nothing: m = -inf).
  float l = 0.f;
  for (int s = threadIdx.x; s < p.splits; s += kCombineThreads) {
    const float ls = ml[(s * g + qi) * 2 + 1];
    const float w = m == -INFINITY || !(ls > 0.f) ? 0.f : expf(ml[(s * g + qi) * 2] - m);
    s_w[s] = w;
    l = fmaf(w, ls, l);
  }
  const float total = block_reduce(l, false);  // its barrier also publishes s_w
  float a[PER_LANE];
#pragma unroll
  for (int e = 0; e < PER_LANE; ++e)
    a[e] = 0.f;
#pragma unroll 4
  for (int s = warp; s < p.splits; s += kCombineWarps) {
    const float w = s_w[s];
    const float* src = acc + (static_cast<int64_t>(s) * g + qi) * D + lane * PER_LANE;
    float v[PER_LANE];
#pragma unroll
    for (int e = 0; e < PER_LANE; e += 2) {
      const float2 x = *reinterpret_cast<const float2*>(src + e);
      v[e] = x.x;
      v[e + 1] = x.y;
    }
#pragma unroll
    for (int e = 0; e < PER_LANE; ++e)
      a[e] = fmaf(w, v[e], a[e]);
  }
#pragma unroll
  for (int e = 0; e < PER_LANE; ++e)
    s_acc[warp][lane * PER_LANE + e] = a[e];
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += kCombineThreads) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w)
      sum += s_acc[w][d];
    static_cast<T*>(p.out)[(static_cast<int64_t>(rh) * g + qi) * D + d] =
        from_f<T>(total > 0.f ? sum / total : 0.f);
  }
}

// Blocks of the partial kernel one SM holds at once (registers and shared memory; the occupancy
// calculator, once per instance and device).
template <typename T, int D, int G>
int partial_blocks_per_sm() {
  static thread_local int cached_device = -1, cached = 0;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &cached, decode_partial_kernel<T, D, G>, kThreads, partial_smem_bytes<T, D, G>()));
    cached = std::max(cached, 1);
    cached_device = device;
  }
  return cached;
}

template <typename T, int D, int G>
void launch(Params p, int64_t rows, const at::TensorOptions& f32) {
  constexpr int C = chunk_slots<T, D>();
  const int64_t tiles = (p.slots + C - 1) / C;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t rh = rows * p.hkv;
  if (p.interleaved) {
    // About four blocks per SM, at most one per tile, and as few as give no block more tiles
    // than that.
    const int64_t want = std::max<int64_t>(1, std::min(tiles, (4 * sms + rh - 1) / rh));
    const int64_t per_split = (tiles + want - 1) / want;
    p.splits = static_cast<int>(std::max<int64_t>(1, (tiles + per_split - 1) / per_split));
  } else {
    // One wave: as many blocks as the SMs hold at once over all rows and heads, at most one per
    // tile of the capacity (the runs are balanced on the device over the slots in use).
    const int64_t resident = partial_blocks_per_sm<T, D, G>() * sms;
    p.splits = static_cast<int>(std::max<int64_t>(1, std::min(tiles, resident / rh)));
  }
  // Freed at return: the caching allocator hands the blocks out again only to work queued after
  // these kernels on this stream (in a capture, the graph's pool keeps them).
  at::Tensor part_acc = at::empty({rh, p.splits, p.g, D}, f32);
  at::Tensor part_ml = at::empty({rh, p.splits, p.g, 2}, f32);
  p.part_acc = part_acc.data_ptr<float>();
  p.part_ml = part_ml.data_ptr<float>();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  decode_partial_kernel<T, D, G><<<dim3(p.splits, static_cast<unsigned>(rh)), kThreads,
                                   partial_smem_bytes<T, D, G>(), stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  C10_CUDA_CHECK(launch_dependent(decode_combine_kernel<T, D>,
                                  dim3(static_cast<unsigned>(rh * p.g)), dim3(kCombineThreads),
                                  p.splits * sizeof(float), stream, p));
}

template <typename T, int D>
void launch_g(const Params& p, int64_t rows, const at::TensorOptions& f32) {
  // A group of three (llama3.2-3b) in registers for three queries, not four: fewer registers a
  // thread, more blocks an SM.
  static const bool g4 = env_flag("ENGRAM_DECODE_ATTENTION_G4");
  if (p.g <= 3 && !g4) {
    launch<T, D, 3>(p, rows, f32);
  } else if (p.g <= 4) {
    launch<T, D, 4>(p, rows, f32);
  } else {
    launch<T, D, 8>(p, rows, f32);
  }
}

template <typename T>
void launch_d(const Params& p, int64_t rows, int64_t d, const at::TensorOptions& f32) {
  if (d == 64) {
    launch_g<T, 64>(p, rows, f32);
  } else if (d == 128) {
    launch_g<T, 128>(p, rows, f32);
  } else if constexpr (sizeof(T) == 2) {
    launch_g<T, 256>(p, rows, f32);
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
  const auto f32 = q.options().dtype(at::kFloat);
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
  static const bool interleaved = env_flag("ENGRAM_DECODE_ATTENTION_INTERLEAVED");
  p.interleaved = interleaved;
  p.scale = static_cast<float>(scale);
  p.out = out.data_ptr();
  switch (q.scalar_type()) {
    case at::kFloat:
      launch_d<float>(p, rows, d, f32);
      break;
    case at::kBFloat16:
      launch_d<__nv_bfloat16>(p, rows, d, f32);
      break;
    case at::kHalf:
      launch_d<__half>(p, rows, d, f32);
      break;
    default:
      throw std::invalid_argument("decode_attention: q must be f32, bf16 or f16");
  }
  return out;
}

}  // namespace engram::gpu
