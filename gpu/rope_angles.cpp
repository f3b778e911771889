#include "gpu/rope_angles.h"

#include <stdexcept>

namespace engram::gpu {

std::pair<at::Tensor, at::Tensor> rope_angles_reference(const at::Tensor& positions,
                                                        const at::Tensor& inv_freq,
                                                        at::ScalarType dtype) {
  // freqs[b, s, i] = position · inv_freq[i], in f32 as in transformers.
  const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [B, S, d/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);             // [B, 1, S, d]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

std::pair<at::Tensor, at::Tensor> rope_angles(const at::Tensor& positions,
                                              const at::Tensor& inv_freq, at::ScalarType dtype) {
  if (positions.dim() != 2 || positions.scalar_type() != at::kLong || inv_freq.dim() != 1 ||
      inv_freq.scalar_type() != at::kFloat) {
    throw std::invalid_argument("rope_angles: positions [B, S] int64 and inv_freq [d/2] f32");
  }
#ifdef ENGRAM_WITH_CUDA
  if (positions.is_cuda() && inv_freq.is_cuda() &&
      (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf)) {
    return rope_angles_cuda(positions, inv_freq, dtype);
  }
#endif
  return rope_angles_reference(positions, inv_freq, dtype);
}

}  // namespace engram::gpu
