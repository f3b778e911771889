// Spherical k-means over the keys of one layer, one clustering per KV head: LouisKV's semantic
// clusters of prompt KV (louiskv-paper §4.2; DESIGN.md "LouisKV"). Cosine similarity, so keys and
// centroids are compared unit-normalised. On CUDA one kernel per step; off CUDA the reference.
//
// keys:       [H, N, d] any float dtype, on the device that computes.
// centroids:  [H, K, d] f32, unit length, same device.
// assignment: [H, N] int64, a cluster of 0..K-1 for every key.
#pragma once

#include <ATen/ATen.h>

namespace engram::gpu {

// argmax_k cos(key, centroid_k) for every key; ties go to the lower k.
at::Tensor kmeans_assign(const at::Tensor& keys, const at::Tensor& centroids);
// The unit-normalised sum of the unit-normalised keys of each cluster; a cluster with no key (or
// whose keys sum to zero) keeps its old centroid. Returns [H, K, d] f32.
at::Tensor kmeans_update(const at::Tensor& keys, const at::Tensor& assignment,
                         const at::Tensor& centroids);

at::Tensor kmeans_assign_reference(const at::Tensor& keys, const at::Tensor& centroids);
at::Tensor kmeans_update_reference(const at::Tensor& keys, const at::Tensor& assignment,
                                   const at::Tensor& centroids);

#ifdef ENGRAM_WITH_CUDA
at::Tensor kmeans_assign_cuda(const at::Tensor& keys, const at::Tensor& centroids);
at::Tensor kmeans_update_cuda(const at::Tensor& keys, const at::Tensor& assignment,
                              const at::Tensor& centroids);
#endif

}  // namespace engram::gpu
