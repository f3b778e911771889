#include "gpu/silu_mul.h"

#include <stdexcept>

namespace engram::gpu {

at::Tensor silu_mul_reference(const at::Tensor& gate_up, int64_t inter) {
  return at::silu(gate_up.narrow(-1, 0, inter)) * gate_up.narrow(-1, inter, inter);
}

at::Tensor silu_mul(const at::Tensor& gate_up, int64_t inter) {
  if (gate_up.dim() < 1 || inter <= 0 || gate_up.size(-1) != 2 * inter)
    throw std::invalid_argument("silu_mul: gate_up's last dimension must be 2 · inter");
#ifdef ENGRAM_WITH_CUDA
  if (gate_up.is_cuda() && gate_up.is_contiguous()) return silu_mul_cuda(gate_up, inter);
#endif
  return silu_mul_reference(gate_up, inter);
}

}  // namespace engram::gpu
