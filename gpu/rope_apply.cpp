#include "gpu/rope_apply.h"

#include <stdexcept>

namespace engram::gpu {

at::Tensor rope_apply_reference(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

at::Tensor rope_apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (x.dim() != 4 || cos.dim() != 4 || sin.sizes() != cos.sizes() || x.size(-1) % 2 != 0 ||
      cos.size(1) != 1 || cos.size(2) != x.size(2) || cos.size(3) != x.size(3) ||
      (cos.size(0) != 1 && cos.size(0) != x.size(0))) {
    throw std::invalid_argument(
        "rope_apply: x [B, H, S, d] (d even) and cos, sin [B or 1, 1, S, d]");
  }
#ifdef ENGRAM_WITH_CUDA
  if (x.is_cuda() && x.scalar_type() == cos.scalar_type() && x.scalar_type() == sin.scalar_type())
    return rope_apply_cuda(x, cos, sin);
#endif
  return rope_apply_reference(x, cos, sin);
}

}  // namespace engram::gpu
