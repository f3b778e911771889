#include "gpu/unit_attention_mass.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <vector>

namespace engram::gpu {
namespace {

void check(const at::Tensor& scores, const at::Tensor& positions, const at::Tensor& unit_begin,
           const at::Tensor& unit_end) {
  if (scores.dim() != 3)
    throw std::invalid_argument("unit_attention_mass: scores must be [heads, rows, T]");
  if (positions.dim() != 1 || positions.size(0) != scores.size(1))
    throw std::invalid_argument("unit_attention_mass: one position per row expected");
  if (unit_begin.dim() != 1 || unit_end.sizes() != unit_begin.sizes())
    throw std::invalid_argument("unit_attention_mass: unit_begin and unit_end must be [units]");
}

}  // namespace

at::Tensor unit_attention_mass_reference(const at::Tensor& scores, const at::Tensor& positions,
                                         const at::Tensor& unit_begin, const at::Tensor& unit_end,
                                         double scale) {
  check(scores, positions, unit_begin, unit_end);
  const int64_t t = scores.size(2);
  const at::Tensor keys = at::arange(t, positions.options());
  const at::Tensor visible = keys.unsqueeze(0).le(positions.unsqueeze(1));  // [rows, T]
  at::Tensor s = scores.to(at::kFloat) * scale;
  s = s.masked_fill(visible.logical_not().unsqueeze(0), -std::numeric_limits<float>::infinity());
  const at::Tensor probs = at::softmax(s, -1).mean(0);  // [rows, T]
  // Each key's unit (keys outside every unit go to one extra column, dropped).
  const int64_t units = unit_begin.size(0);
  const at::Tensor begin = unit_begin.to(at::kCPU, at::kLong).contiguous(),
                   end = unit_end.to(at::kCPU, at::kLong).contiguous();
  const int64_t* b = begin.data_ptr<int64_t>();
  const int64_t* e = end.data_ptr<int64_t>();
  std::vector<int64_t> owner(static_cast<size_t>(t), units);
  for (int64_t u = 0; u < units; ++u)
    std::fill(owner.begin() + std::clamp<int64_t>(b[u], 0, t),
              owner.begin() + std::clamp<int64_t>(std::max(b[u], e[u]), 0, t), u);
  at::Tensor mass = at::zeros({probs.size(0), units + 1}, probs.options());
  mass.index_add_(1, at::tensor(owner, at::kLong).to(probs.device()), probs);
  return mass.narrow(1, 0, units);
}

at::Tensor unit_attention_mass(const at::Tensor& scores, const at::Tensor& positions,
                               const at::Tensor& unit_begin, const at::Tensor& unit_end,
                               double scale) {
  check(scores, positions, unit_begin, unit_end);
#ifdef ENGRAM_WITH_CUDA
  if (scores.is_cuda() && scores.is_contiguous())
    return unit_attention_mass_cuda(scores, positions.contiguous(), unit_begin.contiguous(),
                                    unit_end.contiguous(), scale);
#endif
  return unit_attention_mass_reference(scores, positions, unit_begin, unit_end, scale);
}

}  // namespace engram::gpu
