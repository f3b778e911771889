#include "gpu/row_gather.h"

#include <stdexcept>

namespace engram::gpu {
namespace {

void check(const at::Tensor& dst, const at::Tensor& src, const at::Tensor& rows) {
  if (dst.dim() != 3 || src.dim() != 3 || rows.dim() != 2 || dst.size(0) != src.size(0) ||
      rows.size(0) != src.size(0) || dst.size(2) != src.size(2) || rows.size(1) > dst.size(1)) {
    throw std::invalid_argument(
        "gather_rows: dst [H, M, d], src [H, N, d] and rows [H, R <= M] must agree");
  }
  if (dst.scalar_type() != src.scalar_type())
    throw std::invalid_argument("gather_rows: dst and src dtypes differ");
  if (rows.scalar_type() != at::kLong) throw std::invalid_argument("gather_rows: rows not int64");
}

}  // namespace

void gather_rows_reference(at::Tensor& dst, const at::Tensor& src, const at::Tensor& rows) {
  check(dst, src, rows);
  const at::Tensor r = rows.cpu();
  if (r.numel() && (r.max().item<int64_t>() >= src.size(1) || r.min().item<int64_t>() < -1))
    throw std::out_of_range("gather_rows: a row lies outside the pool");
  for (int64_t h = 0; h < src.size(0); ++h) {
    const at::Tensor head = r.select(0, h);
    const at::Tensor valid = head.ge(0).nonzero().view({-1});
    if (valid.numel() == 0) continue;
    // The index on src's device: index_select does not take a host index for a device src.
    const at::Tensor picked =
        src.select(0, h).index_select(0, head.index_select(0, valid).to(src.device()));
    dst.select(0, h).index_copy_(0, valid.to(dst.device()), picked.to(dst.device()));
  }
}

void gather_rows(at::Tensor& dst, const at::Tensor& src, const at::Tensor& rows) {
#ifdef ENGRAM_WITH_CUDA
  if (dst.is_cuda()) {
    check(dst, src, rows);
    gather_rows_cuda(dst, src, rows);
    return;
  }
#endif
  gather_rows_reference(dst, src, rows);
}

}  // namespace engram::gpu
