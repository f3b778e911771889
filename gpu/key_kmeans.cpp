#include "gpu/key_kmeans.h"

#include <stdexcept>
#include <string>

namespace engram::gpu {
namespace {

void check_keys(const at::Tensor& keys, const at::Tensor& centroids) {
  if (keys.dim() != 3 || centroids.dim() != 3 || keys.size(0) != centroids.size(0) ||
      keys.size(2) != centroids.size(2)) {
    throw std::invalid_argument(
        "kmeans: keys must be [H, N, d] and centroids [H, K, d] of the same H and d");
  }
  if (centroids.scalar_type() != at::kFloat)
    throw std::invalid_argument("kmeans: centroids must be f32");
  if (keys.device() != centroids.device())
    throw std::invalid_argument("kmeans: keys and centroids on different devices");
}

at::Tensor unit_rows(const at::Tensor& x) {
  return x.to(at::kFloat) / x.to(at::kFloat).norm(2, -1, true).clamp_min(1e-12);
}

}  // namespace

at::Tensor kmeans_assign_reference(const at::Tensor& keys, const at::Tensor& centroids) {
  check_keys(keys, centroids);
  return at::bmm(unit_rows(keys), centroids.transpose(1, 2)).argmax(-1);
}

at::Tensor kmeans_update_reference(const at::Tensor& keys, const at::Tensor& assignment,
                                   const at::Tensor& centroids) {
  check_keys(keys, centroids);
  if (assignment.dim() != 2 || assignment.size(0) != keys.size(0) ||
      assignment.size(1) != keys.size(1) || assignment.scalar_type() != at::kLong) {
    throw std::invalid_argument("kmeans_update: assignment must be [H, N] int64");
  }
  if (assignment.numel() && (assignment.min().item<int64_t>() < 0 ||
                             assignment.max().item<int64_t>() >= centroids.size(1))) {
    throw std::out_of_range("kmeans_update: an assignment lies outside 0.." +
                            std::to_string(centroids.size(1) - 1));
  }
  const int64_t d = keys.size(2);
  at::Tensor sums = at::zeros_like(centroids);
  sums.scatter_add_(1, assignment.unsqueeze(-1).expand({-1, -1, d}), unit_rows(keys));
  const at::Tensor norms = sums.norm(2, -1, true);
  return at::where(norms.gt(1e-12), sums / norms.clamp_min(1e-12), centroids);
}

at::Tensor kmeans_assign(const at::Tensor& keys, const at::Tensor& centroids) {
#ifdef ENGRAM_WITH_CUDA
  if (keys.is_cuda()) {
    check_keys(keys, centroids);
    return kmeans_assign_cuda(keys, centroids);
  }
#endif
  return kmeans_assign_reference(keys, centroids);
}

at::Tensor kmeans_update(const at::Tensor& keys, const at::Tensor& assignment,
                         const at::Tensor& centroids) {
#ifdef ENGRAM_WITH_CUDA
  if (keys.is_cuda()) {
    check_keys(keys, centroids);
    return kmeans_update_cuda(keys, assignment, centroids);
  }
#endif
  return kmeans_update_reference(keys, assignment, centroids);
}

}  // namespace engram::gpu
