#include "gpu/softmax_column_max.h"

#include <limits>
#include <stdexcept>

namespace engram::gpu {

at::Tensor softmax_column_max_reference(const at::Tensor& scores) {
  at::Tensor lse = at::logsumexp(scores, -1, /*keepdim=*/true);
  // A row that sees nothing: its -inf scores stay -inf (exp 0) instead of becoming NaN.
  lse.masked_fill_(lse == -std::numeric_limits<float>::infinity(), 0.0);
  return std::get<0>((scores - lse).max(2)).exp();
}

at::Tensor softmax_column_max(const at::Tensor& scores) {
  if (scores.dim() != 4 || scores.scalar_type() != at::kFloat)
    throw std::invalid_argument("softmax_column_max: f32 scores [B, H, N, C] expected");
#ifdef ENGRAM_WITH_CUDA
  if (scores.is_cuda() && scores.size(2) > 0 && scores.size(3) > 0)
    return softmax_column_max_cuda(scores.contiguous());
#endif
  return softmax_column_max_reference(scores);
}

}  // namespace engram::gpu
