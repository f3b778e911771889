// Fixed-size pages of KV in three tiers: the device, a pinned host pool and a spill file on disk.
// A page holds `page_tokens` tokens of every layer, laid out [layers, 2 (k, v), kv_heads,
// page_tokens, head_dim] so that one layer of a page is one contiguous block: the unit loader
// (core/kv/kv_unit_pool.h) moves a layer with one copy per page, on the copy stream, while the
// layers before it compute.
//
// Each tier is one slab allocated up front (device and pinned) or a file grown page by page
// (disk), with a free list: moving pages never allocates on the device, so the working set's
// addresses, and a recorded CUDA graph, stay valid. The spill file is scratch, not user data:
// what must survive a crash is in the conversation store (append-only runs); it is created in a
// folder the caller names and removed with the pool.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "core/kv/kv_cache.h"

namespace engram {

enum class PageTier : uint8_t { kDevice, kPinned, kDisk };
std::string_view page_tier_name(PageTier tier);  // "device", "pinned", "disk"

struct PageRef {
  PageTier tier = PageTier::kDevice;
  int64_t index = -1;
  bool valid() const { return index >= 0; }
  bool operator==(const PageRef&) const = default;
};

struct KvPagePoolOptions {
  int64_t page_tokens = 64;
  int64_t device_pages = 0;  // capacity of each tier in pages; disk grows without a cap
  int64_t pinned_pages = 0;
  std::filesystem::path spill_dir;  // empty: no disk tier
};

class KvPagePool {
 public:
  KvPagePool(KvCacheShape shape, at::ScalarType dtype, at::Device device,
             KvPagePoolOptions options);
  ~KvPagePool();
  KvPagePool(const KvPagePool&) = delete;
  KvPagePool& operator=(const KvPagePool&) = delete;

  // Throws std::runtime_error naming the tier when it is full (or absent).
  PageRef allocate(PageTier tier);
  void release(PageRef page);
  // The page's content in a new page of `to`; the old page is released. Same tier: no-op.
  PageRef move(PageRef page, PageTier to);

  // block: [layers, 2, kv_heads, page_tokens, head_dim], any device, the pool's dtype.
  void write(PageRef page, const at::Tensor& block);
  // The page's content: a view for device/pinned pages, a fresh CPU tensor read from disk.
  at::Tensor read(PageRef page) const;
  // One layer of a resident (device or pinned) page, [2, kv_heads, page_tokens, head_dim].
  at::Tensor layer_block(PageRef page, int64_t layer) const;

  // The tier's slab, [pages, layers, 2, kv_heads, page_tokens, head_dim] (device and pinned;
  // the page gather kernel reads it directly).
  const at::Tensor& slab(PageTier t) const { return tiers_[static_cast<int>(t)].slab; }
  int64_t page_tokens() const { return options_.page_tokens; }
  int64_t page_bytes() const;
  int64_t layer_block_bytes() const { return page_bytes() / shape_.layers; }
  int64_t capacity(PageTier tier) const;  // -1 for the disk (unbounded)
  int64_t in_use(PageTier tier) const;
  const KvCacheShape& shape() const { return shape_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }
  const std::filesystem::path& spill_file() const { return spill_file_; }

 private:
  struct Tier {
    at::Tensor slab;  // [pages, layers, 2, kv_heads, page_tokens, head_dim] (none for disk)
    std::vector<int64_t> free;
    int64_t size = 0;  // pages ever handed out (disk: the file's length in pages)
    int64_t used = 0;
  };
  Tier& tier(PageTier t) { return tiers_[static_cast<int>(t)]; }
  const Tier& tier(PageTier t) const { return tiers_[static_cast<int>(t)]; }
  std::vector<int64_t> page_sizes() const;
  void check(PageRef page) const;

  KvCacheShape shape_;
  at::ScalarType dtype_;
  at::Device device_;
  KvPagePoolOptions options_;
  Tier tiers_[3];
  std::filesystem::path spill_file_;
  int spill_fd_ = -1;
};

}  // namespace engram
