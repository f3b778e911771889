#include "gpu/page_gather.h"

#include <stdexcept>
#include <string>

namespace engram::gpu {
namespace {

void check(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& slab, int64_t layer,
           const at::Tensor& pages, const at::Tensor& slots, const at::Tensor& counts) {
  if (slab.dim() != 6 || keys.dim() != 3 || values.sizes() != keys.sizes() || slab.size(2) != 2 ||
      slab.size(3) != keys.size(0) || slab.size(5) != keys.size(2)) {
    throw std::invalid_argument(
        "page copy: slab must be [pages, layers, 2, kv_heads, page_tokens, head_dim] and "
        "keys/values [kv_heads, capacity, head_dim] of the same heads and head_dim");
  }
  if (layer < 0 || layer >= slab.size(1))
    throw std::invalid_argument("page copy: layer out of range");
  if (slab.scalar_type() != keys.scalar_type() || values.scalar_type() != keys.scalar_type())
    throw std::invalid_argument("page copy: slab and working set dtypes differ");
  if (pages.numel() != slots.numel() || counts.numel() != pages.numel() ||
      pages.scalar_type() != at::kLong || slots.scalar_type() != at::kLong ||
      counts.scalar_type() != at::kLong) {
    throw std::invalid_argument("page copy: pages, slots and counts must be int64 of equal length");
  }
}

}  // namespace

namespace {

// Checks one table entry against the slab and the working set (the reference's bounds).
void check_entry(const at::Tensor& slab, const at::Tensor& keys, int64_t i, int64_t page,
                 int64_t slot, int64_t count, int64_t first) {
  if (page < 0 || page >= slab.size(0) || count < 0 || first < 0 || first + count > slab.size(4) ||
      slot < 0 || slot + count > keys.size(1)) {
    throw std::out_of_range("page copy: page " + std::to_string(i) +
                            " lies outside the slab or the working set");
  }
}

// Calls copy(page block [2, heads, count, dim] of `layer`, keys span, values span) per entry.
template <typename Copy>
void for_each_page(const at::Tensor& slab, int64_t layer, const at::Tensor& keys,
                   const at::Tensor& values, const at::Tensor& pages, const at::Tensor& slots,
                   const at::Tensor& counts, const at::Tensor& first_rows, const Copy& copy) {
  const at::Tensor p = pages.cpu(), s = slots.cpu(), c = counts.cpu();
  const at::Tensor f = first_rows.defined() ? first_rows.cpu() : at::zeros_like(p);
  if (f.numel() != p.numel() || f.scalar_type() != at::kLong)
    throw std::invalid_argument("page copy: first_rows must be int64 beside the pages");
  const int64_t* page = p.data_ptr<int64_t>();
  const int64_t* slot = s.data_ptr<int64_t>();
  const int64_t* count = c.data_ptr<int64_t>();
  const int64_t* first = f.data_ptr<int64_t>();
  for (int64_t i = 0; i < p.numel(); ++i) {
    check_entry(slab, keys, i, page[i], slot[i], count[i], first[i]);
    at::Tensor block = slab.select(0, page[i]).select(0, layer).narrow(2, first[i], count[i]);
    copy(block, keys.narrow(1, slot[i], count[i]), values.narrow(1, slot[i], count[i]));
  }
}

}  // namespace

void gather_pages_reference(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab,
                            int64_t layer, const at::Tensor& pages, const at::Tensor& slots,
                            const at::Tensor& counts) {
  check(keys, values, slab, layer, pages, slots, counts);
  for_each_page(slab, layer, keys, values, pages, slots, counts, {},
                [](const at::Tensor& block, at::Tensor k, at::Tensor v) {
                  k.copy_(block.select(0, 0));
                  v.copy_(block.select(0, 1));
                });
}

void scatter_pages_reference(at::Tensor& slab, int64_t layer, const at::Tensor& keys,
                             const at::Tensor& values, const at::Tensor& pages,
                             const at::Tensor& slots, const at::Tensor& counts,
                             const at::Tensor& first_rows) {
  check(keys, values, slab, layer, pages, slots, counts);
  for_each_page(slab, layer, keys, values, pages, slots, counts, first_rows,
                [](const at::Tensor& block, const at::Tensor& k, const at::Tensor& v) {
                  block.select(0, 0).copy_(k);
                  block.select(0, 1).copy_(v);
                });
}

void gather_pages(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab, int64_t layer,
                  const at::Tensor& pages, const at::Tensor& slots, const at::Tensor& counts) {
#ifdef ENGRAM_WITH_CUDA
  if (keys.is_cuda()) {
    check(keys, values, slab, layer, pages, slots, counts);
    gather_pages_cuda(keys, values, slab, layer, pages, slots, counts);
    return;
  }
#endif
  gather_pages_reference(keys, values, slab, layer, pages, slots, counts);
}

void scatter_pages(at::Tensor& slab, int64_t layer, const at::Tensor& keys,
                   const at::Tensor& values, const at::Tensor& pages, const at::Tensor& slots,
                   const at::Tensor& counts, const at::Tensor& first_rows) {
#ifdef ENGRAM_WITH_CUDA
  if (keys.is_cuda()) {
    check(keys, values, slab, layer, pages, slots, counts);
    scatter_pages_cuda(slab, layer, keys, values, pages, slots, counts, first_rows);
    return;
  }
#endif
  scatter_pages_reference(slab, layer, keys, values, pages, slots, counts, first_rows);
}

}  // namespace engram::gpu
