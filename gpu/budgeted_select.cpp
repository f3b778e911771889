#include "gpu/budgeted_select.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace engram::gpu {
namespace {

void check(const at::Tensor& scores, const at::Tensor& sizes, const at::Tensor& offsets,
           int64_t budget, const at::Tensor& enabled) {
  if (scores.dim() != 2 || sizes.sizes() != scores.sizes() || offsets.sizes() != scores.sizes())
    throw std::invalid_argument("budgeted_select_rows: scores, sizes, offsets must be [H, U]");
  if (sizes.scalar_type() != at::kLong || offsets.scalar_type() != at::kLong)
    throw std::invalid_argument("budgeted_select_rows: sizes and offsets must be int64");
  if (budget < 0) throw std::invalid_argument("budgeted_select_rows: negative budget");
  if (enabled.defined() && (enabled.numel() != 1 || enabled.scalar_type() != at::kBool ||
                            enabled.device() != scores.device()))
    throw std::invalid_argument("budgeted_select_rows: `enabled` is one bool beside the scores");
}

}  // namespace

at::Tensor budgeted_select_rows_reference(const at::Tensor& scores, const at::Tensor& sizes,
                                          const at::Tensor& offsets, int64_t budget,
                                          const at::Tensor& enabled) {
  check(scores, sizes, offsets, budget, enabled);
  if (enabled.defined() && !enabled.item<bool>())
    return at::full({scores.size(0), budget}, -1, scores.options().dtype(at::kLong));
  const at::Tensor s = scores.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor n = sizes.cpu().contiguous(), o = offsets.cpu().contiguous();
  const int64_t heads = s.size(0), units = s.size(1);
  at::Tensor rows = at::full({heads, budget}, -1, at::kLong);
  int64_t* out = rows.data_ptr<int64_t>();
  std::vector<int64_t> order(units);
  for (int64_t h = 0; h < heads; ++h) {
    const float* score = s.data_ptr<float>() + h * units;
    const int64_t* size = n.data_ptr<int64_t>() + h * units;
    const int64_t* offset = o.data_ptr<int64_t>() + h * units;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return score[a] > score[b]; });
    int64_t filled = 0;
    for (int64_t u : order) {
      if (filled == budget) break;
      const int64_t take = std::min(size[u], budget - filled);
      for (int64_t j = 0; j < take; ++j)
        out[h * budget + filled + j] = offset[u] + j;
      filled += std::max<int64_t>(take, 0);
    }
  }
  return rows.to(scores.device());
}

at::Tensor budgeted_select_rows(const at::Tensor& scores, const at::Tensor& sizes,
                                const at::Tensor& offsets, int64_t budget,
                                const at::Tensor& enabled) {
#ifdef ENGRAM_WITH_CUDA
  if (scores.is_cuda()) {
    check(scores, sizes, offsets, budget, enabled);
    return budgeted_select_rows_cuda(scores, sizes, offsets, budget, enabled);
  }
#endif
  return budgeted_select_rows_reference(scores, sizes, offsets, budget, enabled);
}

}  // namespace engram::gpu
