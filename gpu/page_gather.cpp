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
        "gather_pages: slab must be [pages, layers, 2, kv_heads, page_tokens, head_dim] and "
        "keys/values [kv_heads, capacity, head_dim] of the same heads and head_dim");
  }
  if (layer < 0 || layer >= slab.size(1))
    throw std::invalid_argument("gather_pages: layer out of range");
  if (slab.scalar_type() != keys.scalar_type() || values.scalar_type() != keys.scalar_type())
    throw std::invalid_argument("gather_pages: slab and working set dtypes differ");
  if (pages.numel() != slots.numel() || counts.numel() != pages.numel() ||
      pages.scalar_type() != at::kLong || slots.scalar_type() != at::kLong ||
      counts.scalar_type() != at::kLong) {
    throw std::invalid_argument(
        "gather_pages: pages, slots and counts must be int64 of equal length");
  }
}

}  // namespace

void gather_pages_reference(at::Tensor& keys, at::Tensor& values, const at::Tensor& slab,
                            int64_t layer, const at::Tensor& pages, const at::Tensor& slots,
                            const at::Tensor& counts) {
  check(keys, values, slab, layer, pages, slots, counts);
  const at::Tensor p = pages.cpu(), s = slots.cpu(), c = counts.cpu();
  const int64_t* page = p.data_ptr<int64_t>();
  const int64_t* slot = s.data_ptr<int64_t>();
  const int64_t* count = c.data_ptr<int64_t>();
  for (int64_t i = 0; i < p.numel(); ++i) {
    if (page[i] < 0 || page[i] >= slab.size(0) || count[i] < 0 || count[i] > slab.size(4) ||
        slot[i] < 0 || slot[i] + count[i] > keys.size(1)) {
      throw std::out_of_range("gather_pages: page " + std::to_string(i) +
                              " lies outside the slab or the working set");
    }
    const at::Tensor block = slab.select(0, page[i]).select(0, layer).narrow(2, 0, count[i]);
    keys.narrow(1, slot[i], count[i]).copy_(block.select(0, 0));
    values.narrow(1, slot[i], count[i]).copy_(block.select(0, 1));
  }
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

}  // namespace engram::gpu
