#include "gpu/rms_norm.h"

#include <stdexcept>
#include <string>

namespace engram::gpu {

at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (weight.dim() != 1 || weight.size(0) != x.size(-1)) {
    throw std::invalid_argument("rms_norm: weight must be [" + std::to_string(x.size(-1)) + "]");
  }
#ifdef ENGRAM_WITH_CUDA
  if (x.is_cuda() && x.is_contiguous() && weight.scalar_type() == x.scalar_type()) {
    return rms_norm_cuda(x, weight.contiguous(), eps);
  }
#endif
  return rms_norm_reference(x, weight, eps);
}

}  // namespace engram::gpu
