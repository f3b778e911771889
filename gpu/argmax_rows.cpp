#include "gpu/argmax_rows.h"

#include <stdexcept>

namespace engram::gpu {

void argmax_rows_reference(const at::Tensor& logits, at::Tensor& out) {
  out.copy_(logits.argmax(1));
}

void argmax_rows(const at::Tensor& logits, at::Tensor& out) {
  if (logits.dim() != 2 || logits.size(1) == 0 || out.dim() != 1 || out.size(0) != logits.size(0) ||
      out.scalar_type() != at::kLong) {
    throw std::invalid_argument("argmax_rows: logits [rows, vocab > 0] and out [rows] int64");
  }
#ifdef ENGRAM_WITH_CUDA
  if (logits.is_cuda() && out.is_cuda() && logits.scalar_type() == at::kFloat &&
      logits.stride(1) == 1 && out.is_contiguous()) {
    argmax_rows_cuda(logits, out);
    return;
  }
#endif
  argmax_rows_reference(logits, out);
}

}  // namespace engram::gpu
