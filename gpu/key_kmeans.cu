#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpu/float_convert.cuh"
#include "gpu/key_kmeans.h"

namespace engram::gpu {
namespace {

// Assignment tiles: a block scores kAssignKeys keys against the head's centroids, kAssignCents
// at a time, over kAssignDims dimensions per step through shared memory; each of its 16 x 16
// threads owns 4 keys x 4 centroids. The running argmax stays in registers, so the [N, K] score
// matrix a bmm would need (2 GiB at 8 heads x 32768 keys x 2048 centroids) never exists.
constexpr int kAssignKeys = 64;
constexpr int kAssignCents = 64;
constexpr int kAssignDims = 32;
constexpr int kAssignThreads = 256;
constexpr int kPerThread = 4;
constexpr int kSide = 16;  // kAssignKeys / kPerThread == kAssignCents / kPerThread
static_assert(kAssignKeys == kAssignCents && kSide * kSide == kAssignThreads &&
              kSide * kPerThread == kAssignKeys);

// (score, index) with ties to the lower index: the order of the reference's argmax.
__device__ bool better(float score, int64_t index, float best, int64_t best_index) {
  return score > best || (score == best && index < best_index);
}

// Keys are not normalised: cos(key, c) = key·c / |key| and |key| > 0 is common to every
// centroid of that key, so the argmax is the same (a zero key scores 0 everywhere: cluster 0,
// as the reference's 0/1e-12 does). Keys of one tile beyond n are zeros and never written.
template <typename T>
__global__ void kmeans_assign_kernel(const T* keys, const float* centroids, int64_t* assignment,
                                     int64_t n, int64_t k, int64_t d) {
  // [dim][key] and [dim][centroid], padded so that the transposing stores hit distinct banks.
  __shared__ float key_tile[kAssignDims][kAssignKeys + 1];
  __shared__ float cent_tile[kAssignDims][kAssignCents + 1];
  __shared__ float best_score[kAssignKeys][kSide];
  __shared__ int64_t best_cent[kAssignKeys][kSide];

  const int64_t head = blockIdx.y;
  const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kAssignKeys;
  const T* head_keys = keys + head * n * d;
  const float* head_cents = centroids + head * k * d;
  const int tx = threadIdx.x % kSide;  // centroids tx, tx + 16, tx + 32, tx + 48 of a tile
  const int ty = threadIdx.x / kSide;  // keys 4 ty .. 4 ty + 3 of the block's tile

  float best[kPerThread];
  int64_t best_index[kPerThread];
  for (int i = 0; i < kPerThread; ++i) {
    best[i] = -INFINITY;
    best_index[i] = k;  // loses every comparison with a real centroid
  }

  for (int64_t c0 = 0; c0 < k; c0 += kAssignCents) {
    float dot[kPerThread][kPerThread] = {};
    for (int64_t d0 = 0; d0 < d; d0 += kAssignDims) {
      for (int e = threadIdx.x; e < kAssignKeys * kAssignDims; e += kAssignThreads) {
        const int row = e / kAssignDims, col = e % kAssignDims;
        const int64_t key = key0 + row, dim = d0 + col;
        key_tile[col][row] = key < n && dim < d ? to_f(head_keys[key * d + dim]) : 0.f;
        const int64_t cent = c0 + row;
        cent_tile[col][row] = cent < k && dim < d ? head_cents[cent * d + dim] : 0.f;
      }
      __syncthreads();
#pragma unroll 8
      for (int j = 0; j < kAssignDims; ++j) {
        float a[kPerThread], b[kPerThread];
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          a[i] = key_tile[j][ty * kPerThread + i];
          b[i] = cent_tile[j][tx + i * kSide];
        }
#pragma unroll
        for (int i = 0; i < kPerThread; ++i)
#pragma unroll
          for (int c = 0; c < kPerThread; ++c)
            dot[i][c] = fmaf(a[i], b[c], dot[i][c]);
      }
      __syncthreads();
    }
    // This thread's centroids come in increasing order, so a strict comparison already keeps
    // the lower index of a tie; `better` is for the merge across threads below.
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      const int64_t cent = c0 + tx + c * kSide;
      if (cent >= k) continue;
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        if (better(dot[i][c], cent, best[i], best_index[i])) {
          best[i] = dot[i][c];
          best_index[i] = cent;
        }
      }
    }
  }

  for (int i = 0; i < kPerThread; ++i) {
    best_score[ty * kPerThread + i][tx] = best[i];
    best_cent[ty * kPerThread + i][tx] = best_index[i];
  }
  __syncthreads();
  if (threadIdx.x < kAssignKeys && key0 + threadIdx.x < n) {
    float score = best_score[threadIdx.x][0];
    int64_t index = best_cent[threadIdx.x][0];
    for (int t = 1; t < kSide; ++t) {
      if (better(best_score[threadIdx.x][t], best_cent[threadIdx.x][t], score, index)) {
        score = best_score[threadIdx.x][t];
        index = best_cent[threadIdx.x][t];
      }
    }
    // A key whose every score is NaN keeps no centroid; cluster 0 rather than an invalid k.
    assignment[head * n + key0 + threadIdx.x] = index < k ? index : 0;
  }
}

// The tensor-core assignment for bf16 keys (mma.sync m16n8k16, f32 accumulation). Each warp holds
// 32 keys as A fragments in registers for the whole run; the block streams its head's centroids
// through two shared stages of 32 (cp.async: the next stage arrives while this one is scored).
// A centroid is split into two bf16 parts (hi + mid carry 16 bits of its f32 mantissa, so a
// cosine is off by at most 2^-18 ~ 3.8e-6: the argmax is the f32 reference's away from 1e-5
// near-ties) and both products accumulate in f32. The accumulator layout of mma.sync is fixed,
// so each lane keeps the running argmax of its own 4 rows in registers and the score tile is
// never written anywhere. At 8 heads x 32,768 keys x 2,048 centroids the wmma kernel this
// replaces (16 keys a warp, three parts, each 16 x 16 score tile stored to shared memory and
// scanned) took 3.09 ms on an H100, the f32 FMA kernel above 6.8.
constexpr int kTcWarps = 8;
constexpr int kTcWarpKeys = 32;  // two m16 tiles
constexpr int kTcKeys = kTcWarpKeys * kTcWarps;
constexpr int kTcCents = 32;  // four n8 tiles a stage
constexpr int kTcMaxDim = 128;
constexpr int kTcStride = kTcMaxDim + 8;  // bf16 per shared row: ldmatrix rows on distinct banks
constexpr int kTcParts = 2;

__device__ inline void mma_bf16(float* acc, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline void ldmatrix_x4(uint32_t* r, const void* smem) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ inline void copy16_async(void* smem, const void* global) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global));
}

// keys [H, N, d] bf16 (d a multiple of 32, at most 128; rows 4-byte aligned); parts [2, H, K, d].
__global__ void __launch_bounds__(kTcWarps * 32)
    kmeans_assign_tc_kernel(const __nv_bfloat16* keys, const __nv_bfloat16* parts,
                            int64_t* assignment, int64_t n, int64_t heads, int64_t k, int64_t d) {
  __shared__ __align__(16) __nv_bfloat16 cents[2][kTcParts][kTcCents][kTcStride];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, quad = lane % 4;  // the mma fragments' row and column owners
  const int64_t head = blockIdx.y;
  const int64_t block_key0 = static_cast<int64_t>(blockIdx.x) * kTcKeys;
  const int64_t key0 = block_key0 + warp * kTcWarpKeys;
  const int pairs = static_cast<int>(d / 32);  // k-steps of 16, loaded two at a time

  // A fragments (row-major 16 x 16 per k-step): a lane holds rows group and group + 8 at
  // columns 2 quad, 2 quad + 1 and those + 8. Keys past n are zeros and never written.
  uint32_t a[2][kTcMaxDim / 16][4];
  const __nv_bfloat16* head_keys = keys + head * n * d;
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t key = key0 + m * 16 + group + half * 8;
      const bool inside = key < n;
#pragma unroll
      for (int s = 0; s < kTcMaxDim / 16; ++s) {
        uint32_t lo = 0, hi = 0;
        if (inside && s < 2 * pairs) {
          const __nv_bfloat16* row = head_keys + key * d + s * 16 + 2 * quad;
          lo = *reinterpret_cast<const uint32_t*>(row);
          hi = *reinterpret_cast<const uint32_t*>(row + 8);
        }
        a[m][s][half] = lo;
        a[m][s][2 + half] = hi;
      }
    }
  }

  const int64_t plane = heads * k * d;
  const int chunks = static_cast<int>(d / 8);  // 16-byte chunks of a centroid row
  auto load_stage = [&](int stage, int64_t c0) {
    for (int e = threadIdx.x; e < kTcParts * kTcCents * chunks; e += blockDim.x) {
      const int chunk = e % chunks, r = e / chunks, cent = r % kTcCents, part = r / kTcCents;
      __nv_bfloat16* dst = &cents[stage][part][cent][chunk * 8];
      if (c0 + cent < k) {
        copy16_async(dst, parts + part * plane + (head * k + c0 + cent) * d + chunk * 8);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };

  // Rows group, group + 8 of each m tile: (score, centroid). Centroids come in increasing order
  // per lane, so a strict comparison keeps the lower index of a tie.
  float best[2][2];
  int best_index[2][2];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      best[m][h] = -INFINITY;
      best_index[m][h] = static_cast<int>(k);  // loses every comparison with a real centroid
    }

  const int64_t tiles = (k + kTcCents - 1) / kTcCents;
  load_stage(0, 0);
  for (int64_t t = 0; t < tiles; ++t) {
    const int stage = static_cast<int>(t & 1);
    if (t + 1 < tiles) {
      load_stage(stage ^ 1, (t + 1) * kTcCents);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();
    const int64_t c0 = t * kTcCents;
#pragma unroll
    for (int nt = 0; nt < kTcCents / 8; ++nt) {
      float acc[2][4] = {};
#pragma unroll
      for (int part = 0; part < kTcParts; ++part) {
#pragma unroll
        for (int p = 0; p < kTcMaxDim / 32; ++p) {
          if (p >= pairs) continue;
          // Matrices 0..3: this n tile's 8 centroids at dims 32 p + 0, 8, 16, 24: b0 b1 of
          // k-step 2 p, then of 2 p + 1.
          uint32_t b[4];
          ldmatrix_x4(b, &cents[stage][part][nt * 8 + lane % 8][p * 32 + (lane / 8) * 8]);
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            mma_bf16(acc[m], a[m][2 * p], b[0], b[1]);
            mma_bf16(acc[m], a[m][2 * p + 1], b[2], b[3]);
          }
        }
      }
      const int64_t cent = c0 + nt * 8 + 2 * quad;
#pragma unroll
      for (int m = 0; m < 2; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float score = acc[m][2 * h + c];
            if (cent + c < k && score > best[m][h]) {
              best[m][h] = score;
              best_index[m][h] = static_cast<int>(cent + c);
            }
          }
        }
      }
    }
    __syncthreads();  // the next iteration loads into this stage
  }

  // The four lanes of a quad hold the same rows: merge, ties to the lower centroid.
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float score = best[m][h];
      int index = best_index[m][h];
#pragma unroll
      for (int off = 1; off < 4; off *= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, score, off);
        const int other_index = __shfl_xor_sync(0xffffffffu, index, off);
        if (better(other, other_index, score, index)) {
          score = other;
          index = other_index;
        }
      }
      const int64_t key = key0 + m * 16 + group + h * 8;
      // A key whose every score is NaN keeps no centroid: cluster 0 rather than an invalid k.
      if (quad == 0 && key < n) assignment[head * n + key] = index < k ? index : 0;
    }
  }
}

template <typename T>
__global__ void kmeans_inverse_norm_kernel(const T* keys, float* inverse, int64_t items,
                                           int64_t d) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       item < items; item += warps) {
    const T* key = keys + item * d;
    float square = 0.f;
    for (int64_t i = lane; i < d; i += 32) {
      const float v = to_f(key[i]);
      square += v * v;
    }
    for (int offset = 16; offset > 0; offset /= 2)
      square += __shfl_xor_sync(0xffffffff, square, offset);
    if (lane == 0) inverse[item] = 1.f / fmaxf(sqrtf(square), 1e-12f);
  }
}

// One thread per (head, cluster, dimension): the sum of the cluster's unit keys in text order
// (members[] lists each head's keys sorted by cluster, stably). A fixed order makes the update,
// and so the clustering and LouisKV's units, the same from run to run; float atomics did not
// (their order varied, and on random weights a rounding flip moved keys between clusters).
template <typename T>
__global__ void kmeans_cluster_sum_kernel(const T* keys, const float* inverse,
                                          const int64_t* members, const int64_t* starts,
                                          const int64_t* counts, float* sums, int64_t heads,
                                          int64_t n, int64_t k, int64_t d) {
  const int64_t total = heads * k * d;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < total;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t dim = item % d, cluster = item / d, head = cluster / k;
    const int64_t* member = members + head * n + starts[cluster];
    float sum = 0.f;
    for (int64_t m = 0; m < counts[cluster]; ++m) {
      const int64_t key = head * n + member[m];
      sum += to_f(keys[key * d + dim]) * inverse[key];
    }
    sums[item] = sum;
  }
}

// One warp per (head, cluster): normalise the sum, or keep the old centroid when it is
// (numerically) zero: an empty cluster, or keys that cancel.
__global__ void kmeans_normalise_kernel(const float* sums, const float* centroids, float* out,
                                        int64_t clusters, int64_t d) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       item < clusters; item += warps) {
    const float* sum = sums + item * d;
    float square = 0.f;
    for (int64_t i = lane; i < d; i += 32)
      square += sum[i] * sum[i];
    for (int offset = 16; offset > 0; offset /= 2)
      square += __shfl_xor_sync(0xffffffff, square, offset);
    const float norm = sqrtf(square);
    for (int64_t i = lane; i < d; i += 32)
      out[item * d + i] = norm > 1e-12f ? sum[i] / norm : centroids[item * d + i];
  }
}

constexpr int kWarpThreads = 256;

int64_t warp_blocks(int64_t items) {
  const int64_t per_block = kWarpThreads / 32;
  return std::max<int64_t>(1, std::min<int64_t>((items + per_block - 1) / per_block, 65536));
}

// f32, bf16 and f16 keys are read as they are; any other float dtype goes through f32.
at::Tensor readable_keys(const at::Tensor& keys) {
  const at::ScalarType t = keys.scalar_type();
  if (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) return keys.contiguous();
  if (!at::isFloatingType(t)) throw std::invalid_argument("kmeans: keys must be a float dtype");
  return keys.to(at::kFloat).contiguous();
}

template <typename T>
void launch_assign(const at::Tensor& keys, const at::Tensor& centroids, at::Tensor& assignment) {
  const int64_t heads = keys.size(0), n = keys.size(1), d = keys.size(2), k = centroids.size(1);
  const dim3 grid((n + kAssignKeys - 1) / kAssignKeys, heads);
  kmeans_assign_kernel<T><<<grid, kAssignThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const T*>(keys.data_ptr()), centroids.data_ptr<float>(),
      assignment.data_ptr<int64_t>(), n, k, d);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// bf16 keys with a head dimension the fragments tile (32 .. 128 in steps of 32), rows 4-byte
// aligned (the fragments load bf16 pairs).
bool tensor_core_assign(const at::Tensor& keys) {
  const int64_t d = keys.size(2);
  return keys.scalar_type() == at::kBFloat16 && d % 32 == 0 && d <= kTcMaxDim &&
         reinterpret_cast<uintptr_t>(keys.data_ptr()) % 4 == 0 && keys.size(0) <= 65535;
}

void launch_assign_tc(const at::Tensor& keys, const at::Tensor& centroids, at::Tensor& assignment) {
  const int64_t heads = keys.size(0), n = keys.size(1), d = keys.size(2), k = centroids.size(1);
  if (k > INT32_MAX) throw std::invalid_argument("kmeans_assign: more than 2^31 centroids");
  const at::Tensor hi = centroids.to(at::kBFloat16);
  const at::Tensor mid = (centroids - hi.to(at::kFloat)).to(at::kBFloat16);
  const at::Tensor parts = at::stack({hi, mid}).contiguous();
  const dim3 grid((n + kTcKeys - 1) / kTcKeys, heads);
  kmeans_assign_tc_kernel<<<grid, kTcWarps * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(keys.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(parts.data_ptr()), assignment.data_ptr<int64_t>(), n,
      heads, k, d);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void launch_cluster_sums(const at::Tensor& keys, const at::Tensor& assignment, at::Tensor& sums) {
  const int64_t heads = keys.size(0), n = keys.size(1), d = keys.size(2), k = sums.size(1);
  const auto stream = at::cuda::getCurrentCUDAStream();
  at::Tensor inverse = at::empty({heads, n}, keys.options().dtype(at::kFloat));
  kmeans_inverse_norm_kernel<T><<<warp_blocks(heads * n), kWarpThreads, 0, stream>>>(
      reinterpret_cast<const T*>(keys.data_ptr()), inverse.data_ptr<float>(), heads * n, d);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // Each head's keys by cluster (a stable sort keeps text order inside a cluster); integer
  // counts are exact whatever order they add in.
  const at::Tensor members = std::get<1>(assignment.sort(/*stable=*/true, 1, false)).contiguous();
  at::Tensor counts = at::zeros({heads, k}, assignment.options());
  counts.scatter_add_(1, assignment, at::ones_like(assignment));
  const at::Tensor starts = (counts.cumsum(1) - counts).contiguous();
  const int64_t total = heads * k * d;
  const int64_t blocks = std::min<int64_t>((total + kWarpThreads - 1) / kWarpThreads, 65536);
  kmeans_cluster_sum_kernel<T><<<blocks, kWarpThreads, 0, stream>>>(
      reinterpret_cast<const T*>(keys.data_ptr()), inverse.data_ptr<float>(),
      members.data_ptr<int64_t>(), starts.data_ptr<int64_t>(), counts.data_ptr<int64_t>(),
      sums.data_ptr<float>(), heads, n, k, d);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

at::Tensor kmeans_assign_cuda(const at::Tensor& keys, const at::Tensor& centroids) {
  const at::Tensor k = readable_keys(keys);
  const at::Tensor c = centroids.contiguous();
  at::Tensor assignment = at::empty({k.size(0), k.size(1)}, k.options().dtype(at::kLong));
  if (assignment.numel() == 0) return assignment;
  if (c.size(1) == 0) throw std::invalid_argument("kmeans_assign: no centroids");
  if (k.size(2) == 0) return assignment.zero_();  // every score 0: the lowest cluster
  switch (k.scalar_type()) {
    case at::kFloat:
      launch_assign<float>(k, c, assignment);
      break;
    case at::kBFloat16:
      if (tensor_core_assign(k)) {
        launch_assign_tc(k, c, assignment);
      } else {
        launch_assign<__nv_bfloat16>(k, c, assignment);
      }
      break;
    default:
      launch_assign<__half>(k, c, assignment);
      break;
  }
  return assignment;
}

at::Tensor kmeans_update_cuda(const at::Tensor& keys, const at::Tensor& assignment,
                              const at::Tensor& centroids) {
  if (assignment.dim() != 2 || assignment.size(0) != keys.size(0) ||
      assignment.size(1) != keys.size(1) || assignment.scalar_type() != at::kLong) {
    throw std::invalid_argument("kmeans_update: assignment must be [H, N] int64");
  }
  const at::Tensor k = readable_keys(keys);
  const at::Tensor a = assignment.to(k.device()).contiguous();
  const at::Tensor c = centroids.contiguous();
  // One synchronisation per update (not per assignment): a cluster outside 0..K-1 is an error,
  // as the reference's scatter_add makes it, not a silently dropped key.
  if (a.numel()) {
    const auto [lowest, highest] = at::aminmax(a);
    if (lowest.item<int64_t>() < 0 || highest.item<int64_t>() >= c.size(1)) {
      throw std::out_of_range("kmeans_update: an assignment lies outside 0.." +
                              std::to_string(c.size(1) - 1));
    }
  }
  at::Tensor sums = at::zeros_like(c);
  if (a.numel() && k.size(2)) {
    switch (k.scalar_type()) {
      case at::kFloat:
        launch_cluster_sums<float>(k, a, sums);
        break;
      case at::kBFloat16:
        launch_cluster_sums<__nv_bfloat16>(k, a, sums);
        break;
      default:
        launch_cluster_sums<__half>(k, a, sums);
        break;
    }
  }
  at::Tensor out = at::empty_like(c);
  const int64_t clusters = c.size(0) * c.size(1);
  if (clusters == 0 || c.size(2) == 0) return out;
  kmeans_normalise_kernel<<<warp_blocks(clusters), kWarpThreads, 0,
                            at::cuda::getCurrentCUDAStream()>>>(
      sums.data_ptr<float>(), c.data_ptr<float>(), out.data_ptr<float>(), clusters, c.size(2));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace engram::gpu
