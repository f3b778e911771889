#include "gpu/rope_rotate.h"

#include <stdexcept>

namespace engram::gpu {

void rope_rotate_reference_(at::Tensor& keys, const at::Tensor& deltas,
                            const at::Tensor& inv_freq) {
  const int64_t half = keys.size(-1) / 2;
  at::Tensor angles = deltas.to(at::kFloat).unsqueeze(-1) * inv_freq.to(at::kFloat).unsqueeze(0);
  at::Tensor cos = angles.cos();  // [tokens, half]
  at::Tensor sin = angles.sin();
  at::Tensor k = keys.to(at::kFloat);
  at::Tensor x1 = k.narrow(-1, 0, half);
  at::Tensor x2 = k.narrow(-1, half, half);
  at::Tensor y1 = x1 * cos - x2 * sin;
  at::Tensor y2 = x2 * cos + x1 * sin;
  keys.copy_(at::cat({y1, y2}, -1));
}

void rope_rotate_(at::Tensor& keys, const at::Tensor& deltas, const at::Tensor& inv_freq) {
  if (keys.size(-1) % 2 != 0 || inv_freq.numel() != keys.size(-1) / 2) {
    throw std::invalid_argument("rope_rotate_: head_dim must be even and match inv_freq");
  }
  if (deltas.numel() != keys.size(-2)) {
    throw std::invalid_argument("rope_rotate_: one delta per token expected");
  }
#ifdef ENGRAM_WITH_CUDA
  if (keys.is_cuda()) {
    rope_rotate_cuda_(keys, deltas, inv_freq);
    return;
  }
#endif
  rope_rotate_reference_(keys, deltas, inv_freq);
}

}  // namespace engram::gpu
