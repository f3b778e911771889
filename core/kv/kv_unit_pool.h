// Memory units in the paged pool: a unit (a turn, a segment, a group, an episode, a cluster, a
// decode segment) owns whole pages of KvPagePool with the RoPE positions its keys are rotated
// to. Moving a unit moves its pages between the device, the pinned host pool and the spill file;
// reading it back gives the same bits (tests/test_kv_pages.cpp).
//
// UnitLoadingKvSource brings units into a working set during a forward pass: the slots are
// claimed at once, each layer's pages are copied on the copy lane one layer ahead of compute
// (kv_copy intervals in the trace), and attention of layer l waits only for layer l's copies.
// Unlike PinnedKvSource, which copies a prefix at every forward, a loaded unit then stays in the
// working set like any other KV.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/kv/cache_kv_source.h"
#include "core/kv/kv_page_pool.h"

namespace engram {

struct KvUnit {
  int64_t id = -1;
  std::string kind;
  int64_t stream_begin = -1;  // first stream token it holds, -1 when it is not a stream span
  int64_t tokens = 0;
  std::vector<int64_t> positions;  // where its keys are rotated to, one per token
  std::vector<PageRef> pages;      // ceil(tokens / page_tokens), all in one tier
  PageTier tier() const { return pages.empty() ? PageTier::kDevice : pages.front().tier; }
};

// A page table for gpu::gather_pages: per page of one tier, its slab page, the first slot it
// fills and its token count (a unit's last page is partly filled).
struct PageTableRows {
  std::vector<int64_t> page, slot, count;
  // The pages of `unit` in `tier`; its tokens go to slots first_slot.. in order.
  void add_unit(const KvUnit& unit, int64_t first_slot, PageTier tier, int64_t page_tokens);
  bool empty() const { return page.empty(); }
  // [3, n] int64 on the host, pinned when `pinned` (so that its copy to the device is
  // asynchronous too).
  at::Tensor host_tensor(bool pinned) const;
};

class KvUnitPool {
 public:
  explicit KvUnitPool(KvPagePool& pages) : pages_(pages) {}
  ~KvUnitPool();
  KvUnitPool(const KvUnitPool&) = delete;
  KvUnitPool& operator=(const KvUnitPool&) = delete;

  // A new unit from kv [layers, 2, kv_heads, n, head_dim] (any device) whose keys are at
  // `positions` (n of them), stored in `tier`. Returns its id. On a full tier nothing is kept.
  int64_t add(std::string kind, int64_t stream_begin, const at::Tensor& kv,
              std::vector<int64_t> positions, PageTier tier);
  // A new unit of positions.size() tokens whose pages (in a resident tier) are allocated but not
  // written: the caller writes them layer by layer (gpu::scatter_pages with the unit's page
  // table), for KV computed on another stream while a prefill that reads it runs. Returns its id.
  int64_t reserve(std::string kind, int64_t stream_begin, std::vector<int64_t> positions,
                  PageTier tier);
  // A new unit from `n` slots of row 0 of `cache` from `first_slot` on, with the slots' positions,
  // in a resident tier (device or pinned): one page-scatter per layer, no staging copy (an
  // episode written back from the working set). The copies are on the current stream.
  int64_t add_from_cache(std::string kind, int64_t stream_begin, const KvCache& cache,
                         int64_t first_slot, int64_t n, PageTier tier);
  // A copy of unit `id` in `tier` (the same bits and positions). Returns its id.
  int64_t clone(int64_t id, PageTier tier);
  // Moves every page of the unit to `tier`; on failure (tier full, disk error) the unit stays
  // where it was, whole.
  void move(int64_t id, PageTier tier);
  // [layers, 2, kv_heads, n, head_dim] on the CPU.
  at::Tensor read(int64_t id) const;
  void remove(int64_t id);

  const KvUnit& unit(int64_t id) const;
  std::vector<int64_t> ids() const;
  int64_t tokens_in(PageTier tier) const;
  // Pages `tokens` tokens take (a unit's pages are its own).
  int64_t pages_for(int64_t tokens) const;
  KvPagePool& pages() const { return pages_; }

 private:
  // Allocates n pages of `tier`, all or none.
  std::vector<PageRef> allocate(int64_t n, PageTier tier);
  // Host reads of pages written by the device (a kernel into pinned memory) wait for it.
  void sync_device() const;
  // The pages' content in new pages of `tier`, all or none (the originals stay).
  std::vector<PageRef> copy_pages(const std::vector<PageRef>& from, PageTier tier);

  KvPagePool& pages_;
  std::map<int64_t, KvUnit> units_;
  int64_t next_id_ = 0;
};

class UnitLoadingKvSource : public KvSource {
 public:
  // Loads `units` (device or pinned; a disk unit must be moved up first) into row 0 of `cache`
  // at the next forward, in order, after the cache's current slots; `prefetch_depth` layers are
  // copied ahead. `pool` and `cache` must outlive the source.
  UnitLoadingKvSource(const KvUnitPool& pool, std::vector<int64_t> units, KvCache& cache,
                      int64_t prefetch_depth = 1);

  // Loads the units now, without a forward: every layer's copies are issued on the copy lane and
  // the compute stream waits for all of them (a policy that assembles its working set before
  // decoding; the "load, then compute" baseline of bench pages).
  void load_now(gpu::DeviceTimeline& timeline, TraceRecorder* trace = nullptr);

  void begin_forward(const ForwardContext& ctx) override;
  AttendKv layer_kv(int64_t layer, const FreshKv& fresh, const ForwardContext& ctx) override;
  void end_forward(const ForwardContext& ctx) override;

  int64_t loaded_tokens() const { return loaded_tokens_; }
  int64_t copied_bytes() const { return copied_bytes_; }

 private:
  void claim(int64_t spare);
  void issue(int64_t layer, gpu::DeviceTimeline& timeline, TraceRecorder* trace);

  const KvUnitPool& pool_;
  std::vector<int64_t> units_;
  KvCache& cache_;
  CacheKvSource plain_;
  int64_t depth_;
  bool pending_ = true;   // the units are loaded at the first forward only
  bool loading_ = false;  // this forward carries the copies
  int64_t first_slot_ = 0;
  // Per resident tier (device, pinned): the page table of the load, [3, pages] int64 rows
  // (slab page, first slot, tokens), on the host and, from the first copy on, on the device.
  struct PageTable {
    PageTier tier = PageTier::kPinned;
    at::Tensor host;
    at::Tensor device;
  };
  std::vector<PageTable> tables_;
  std::vector<int64_t> done_marks_;
  int64_t loaded_tokens_ = 0;
  int64_t copied_bytes_ = 0;
};

}  // namespace engram
