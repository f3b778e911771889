#include "gpu/rms_norm_exact.h"

#include <cstdint>

#include "gpu/rms_norm.h"

namespace engram::gpu {

at::Tensor rms_norm_exact(const at::Tensor& x, const at::Tensor& weight, double eps) {
#ifdef ENGRAM_WITH_CUDA
  if (x.is_cuda() && x.is_contiguous() && x.dim() >= 1 && x.numel() > 0 &&
      weight.scalar_type() == x.scalar_type() && weight.dim() == 1 &&
      weight.size(0) == x.size(-1) && x.size(-1) % (16 / x.element_size()) == 0 &&
      reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(weight.data_ptr()) % 16 == 0 &&
      (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16 ||
       x.scalar_type() == at::kHalf)) {
    return rms_norm_exact_cuda(x, weight.contiguous(), eps);
  }
#endif
  return rms_norm_reference(x, weight, eps);
}

}  // namespace engram::gpu
