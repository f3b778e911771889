#include "gpu/row_gather.h"

#include <stdexcept>

namespace engram::gpu {
namespace {

void check_paged(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& slab,
                 int64_t layer, const at::Tensor& table, const at::Tensor& rows,
                 const at::Tensor& enabled) {
  if (slab.dim() != 6 || slab.size(2) != 2 || keys.dim() != 3 || values.sizes() != keys.sizes() ||
      rows.dim() != 2 || table.dim() != 1 || slab.size(3) != keys.size(0) ||
      slab.size(5) != keys.size(2) || rows.size(0) != keys.size(0) || rows.size(1) > keys.size(1)) {
    throw std::invalid_argument(
        "gather_paged_rows: slab [pages, layers, 2, H, P, d], keys/values [H, M, d], table [T] "
        "and rows [H, R <= M] must agree");
  }
  if (layer < 0 || layer >= slab.size(1))
    throw std::invalid_argument("gather_paged_rows: layer out of range");
  if (slab.scalar_type() != keys.scalar_type() || values.scalar_type() != keys.scalar_type())
    throw std::invalid_argument("gather_paged_rows: slab and destination dtypes differ");
  if (rows.scalar_type() != at::kLong || table.scalar_type() != at::kLong)
    throw std::invalid_argument("gather_paged_rows: table and rows must be int64");
  if (enabled.defined() && (enabled.numel() != 1 || enabled.scalar_type() != at::kBool ||
                            enabled.device() != keys.device()))
    throw std::invalid_argument("gather_paged_rows: `enabled` is one bool beside the destination");
}

}  // namespace

void gather_paged_rows_reference(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab,
                                 int64_t layer, const at::Tensor& table, const at::Tensor& rows,
                                 const at::Tensor& enabled) {
  check_paged(keys, values, slab, layer, table, rows, enabled);
  if (enabled.defined() && !enabled.item<bool>()) return;
  const int64_t page = slab.size(4);
  const at::Tensor r = rows.cpu(), t = table.cpu();
  if (t.numel() && (t.min().item<int64_t>() < 0 || t.max().item<int64_t>() >= slab.size(0)))
    throw std::out_of_range("gather_paged_rows: a table entry lies outside the slab");
  const at::Tensor in_table = r.ge(0).logical_and(r.lt(t.numel() * page));
  for (int64_t h = 0; h < keys.size(0); ++h) {
    const at::Tensor valid = in_table.select(0, h).nonzero().view({-1});
    if (valid.numel() == 0) continue;
    const at::Tensor row = r.select(0, h).index_select(0, valid);
    const at::Tensor pages = t.index_select(0, at::floor_divide(row, page)).to(slab.device());
    const at::Tensor offsets = at::remainder(row, page).to(slab.device());
    const at::Tensor to = valid.to(keys.device());
    for (int64_t kv = 0; kv < 2; ++kv) {
      // [pages, P, d] of this layer, K or V and head, indexed by (page, offset).
      const at::Tensor heads = slab.select(1, layer).select(1, kv).select(1, h);
      const at::Tensor picked = heads.index({pages, offsets});
      (kv == 0 ? keys : values).select(0, h).index_copy_(0, to, picked.to(keys.device()));
    }
  }
}

void gather_paged_rows(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab, int64_t layer,
                       const at::Tensor& table, const at::Tensor& rows, const at::Tensor& enabled) {
#ifdef ENGRAM_WITH_CUDA
  if (keys.is_cuda()) {
    check_paged(keys, values, slab, layer, table, rows, enabled);
    gather_paged_rows_cuda(keys, values, slab, layer, table, rows, enabled);
    return;
  }
#endif
  gather_paged_rows_reference(keys, values, slab, layer, table, rows, enabled);
}

}  // namespace engram::gpu
