#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

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

// The tensor-core assignment for bf16 keys. Each warp holds 16 keys as wmma fragments for the
// whole run and scores them against shared tiles of 32 centroids. A centroid is split into three
// bf16 parts (hi + mid + lo carry its f32 mantissa) and the three products accumulate in f32, so
// the scores are those of the f32 kernel above to a few ulps: the argmax is the same away from
// near-ties. At 8 heads x 32,768 keys x 2,048 centroids the f32 FMA kernel took 6.8 ms on an H100,
// ~97 % of a k-means iteration, and LouisKV's clustering of a 32K prompt ~2.7 s.
constexpr int kTcWarps = 8;
constexpr int kTcKeys = 16 * kTcWarps;
constexpr int kTcCents = 32;
constexpr int kTcMaxDim = 128;
constexpr int kTcStride = kTcMaxDim + 8;  // bf16 per shared row: spreads ldmatrix over banks
constexpr int kTcParts = 3;

__global__ void kmeans_assign_tc_kernel(const __nv_bfloat16* keys, const __nv_bfloat16* parts,
                                        int64_t* assignment, int64_t padded_n, int64_t n,
                                        int64_t heads, int64_t k, int64_t d) {
  namespace wmma = nvcuda::wmma;
  __shared__ __align__(32) __nv_bfloat16 cents[kTcParts][kTcCents][kTcStride];
  __shared__ __align__(32) float scores[kTcWarps][16][16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t head = blockIdx.y;
  const int64_t key0 = static_cast<int64_t>(blockIdx.x) * kTcKeys + warp * 16;
  const bool active = key0 < padded_n;  // padded_n is a multiple of 16
  const int steps = static_cast<int>(d / 16);

  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[kTcMaxDim / 16];
  if (active) {
#pragma unroll
    for (int s = 0; s < kTcMaxDim / 16; ++s)
      if (s < steps) wmma::load_matrix_sync(a[s], keys + (head * padded_n + key0) * d + s * 16, d);
  }
  const int row = lane % 16, half = lane / 16;  // a lane scans 8 of a tile's 16 columns
  float best = -INFINITY;
  int64_t best_index = k;
  const int64_t plane = heads * k * d;
  const int chunks = static_cast<int>(d / 8);  // 16-byte chunks of a centroid row
  for (int64_t c0 = 0; c0 < k; c0 += kTcCents) {
    __syncthreads();  // every warp is done with the previous tile
    for (int e = threadIdx.x; e < kTcParts * kTcCents * chunks; e += blockDim.x) {
      const int chunk = e % chunks, r = e / chunks, cent = r % kTcCents, part = r / kTcCents;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (c0 + cent < k) {
        v = *reinterpret_cast<const uint4*>(parts + part * plane + (head * k + c0 + cent) * d +
                                            chunk * 8);
      }
      *reinterpret_cast<uint4*>(&cents[part][cent][chunk * 8]) = v;
    }
    __syncthreads();
    if (!active) continue;
#pragma unroll
    for (int sub = 0; sub < kTcCents / 16; ++sub) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int part = 0; part < kTcParts; ++part) {
#pragma unroll
        for (int s = 0; s < kTcMaxDim / 16; ++s) {
          if (s >= steps) continue;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
          wmma::load_matrix_sync(b, &cents[part][sub * 16][s * 16], kTcStride);
          wmma::mma_sync(acc, a[s], b, acc);
        }
      }
      wmma::store_matrix_sync(&scores[warp][0][0], acc, 16, wmma::mem_row_major);
      __syncwarp();
      // Columns come in increasing centroid order within a lane: strict > keeps the lower index.
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = half * 8 + j;
        const int64_t cent = c0 + sub * 16 + col;
        const float score = scores[warp][row][col];
        if (cent < k && score > best) {
          best = score;
          best_index = cent;
        }
      }
      __syncwarp();
    }
  }
  const float other = __shfl_xor_sync(0xffffffff, best, 16);
  const int64_t other_index = __shfl_xor_sync(0xffffffff, best_index, 16);
  if (better(other, other_index, best, best_index)) {
    best = other;
    best_index = other_index;
  }
  if (active && half == 0 && key0 + row < n)
    assignment[head * n + key0 + row] = best_index < k ? best_index : 0;
}

// One warp per key: 1 / its norm (the reference's unit rows), for the sums below.
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

// bf16 keys with a head dimension the fragments tile (16 .. 128 in steps of 16).
bool tensor_core_assign(const at::Tensor& keys) {
  const int64_t d = keys.size(2);
  return keys.scalar_type() == at::kBFloat16 && d % 16 == 0 && d <= kTcMaxDim;
}

void launch_assign_tc(const at::Tensor& keys, const at::Tensor& centroids, at::Tensor& assignment) {
  const int64_t heads = keys.size(0), n = keys.size(1), d = keys.size(2), k = centroids.size(1);
  // Fragments load 16 whole keys from 32-byte aligned rows: pad the keys to a multiple of 16
  // (the padding's assignments are never written) and copy a misaligned view.
  const int64_t padded_n = (n + 15) / 16 * 16;
  at::Tensor padded = padded_n == n ? keys : at::constant_pad_nd(keys, {0, 0, 0, padded_n - n});
  if (reinterpret_cast<uintptr_t>(padded.data_ptr()) % 32 != 0) padded = padded.clone();
  const at::Tensor hi = centroids.to(at::kBFloat16);
  const at::Tensor rest = centroids - hi.to(at::kFloat);
  const at::Tensor mid = rest.to(at::kBFloat16);
  const at::Tensor lo = (rest - mid.to(at::kFloat)).to(at::kBFloat16);
  const at::Tensor parts = at::stack({hi, mid, lo}).contiguous();
  const dim3 grid((padded_n + kTcKeys - 1) / kTcKeys, heads);
  kmeans_assign_tc_kernel<<<grid, kTcWarps * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __nv_bfloat16*>(padded.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(parts.data_ptr()), assignment.data_ptr<int64_t>(),
      padded_n, n, heads, k, d);
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
