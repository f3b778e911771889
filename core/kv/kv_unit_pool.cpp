#include "core/kv/kv_unit_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/trace/trace_recorder.h"
#include "gpu/device_info.h"
#include "gpu/device_timeline.h"
#include "gpu/page_gather.h"

namespace engram {

KvUnitPool::~KvUnitPool() {
  for (auto& [id, u] : units_) {
    for (const PageRef& p : u.pages)
      pages_.release(p);
  }
}

int64_t KvUnitPool::add(std::string kind, int64_t stream_begin, const at::Tensor& kv,
                        std::vector<int64_t> positions, PageTier tier) {
  const KvCacheShape& s = pages_.shape();
  const int64_t n = kv.size(3);
  if (kv.dim() != 5 || kv.size(0) != s.layers || kv.size(1) != 2 || kv.size(2) != s.kv_heads ||
      kv.size(4) != s.head_dim || static_cast<int64_t>(positions.size()) != n) {
    throw std::invalid_argument(
        "KvUnitPool::add: kv must be [layers, 2, kv_heads, n, head_dim] with n positions");
  }
  const int64_t p = pages_.page_tokens();
  KvUnit u;
  u.id = next_id_;
  u.kind = std::move(kind);
  u.stream_begin = stream_begin;
  u.tokens = n;
  u.positions = std::move(positions);
  try {
    for (int64_t begin = 0; begin < n; begin += p) {
      const int64_t len = std::min(p, n - begin);
      at::Tensor block = kv.narrow(3, begin, len).to(pages_.dtype());
      if (len < p) {  // the last page: zeros after the unit's tokens, never read as keys
        block = at::constant_pad_nd(block, {0, 0, 0, p - len});
      }
      u.pages.push_back(pages_.allocate(tier));
      pages_.write(u.pages.back(), block);
    }
  } catch (...) {
    for (const PageRef& page : u.pages)
      pages_.release(page);
    throw;
  }
  units_.emplace(u.id, std::move(u));
  return next_id_++;
}

int64_t KvUnitPool::reserve(std::string kind, int64_t stream_begin, std::vector<int64_t> positions,
                            PageTier tier) {
  if (tier == PageTier::kDisk)
    throw std::invalid_argument("KvUnitPool::reserve: a resident tier only");
  KvUnit u;
  u.id = next_id_;
  u.kind = std::move(kind);
  u.stream_begin = stream_begin;
  u.tokens = static_cast<int64_t>(positions.size());
  u.positions = std::move(positions);
  u.pages = allocate(pages_for(u.tokens), tier);
  units_.emplace(u.id, std::move(u));
  return next_id_++;
}

std::vector<PageRef> KvUnitPool::allocate(int64_t n, PageTier tier) {
  std::vector<PageRef> out;
  try {
    for (int64_t i = 0; i < n; ++i)
      out.push_back(pages_.allocate(tier));
  } catch (...) {
    for (const PageRef& page : out)
      pages_.release(page);
    throw;
  }
  return out;
}

int64_t KvUnitPool::pages_for(int64_t tokens) const {
  return (tokens + pages_.page_tokens() - 1) / pages_.page_tokens();
}

void KvUnitPool::sync_device() const {
  if (pages_.device().is_cuda()) gpu::synchronize(pages_.device());
}

int64_t KvUnitPool::add_from_cache(std::string kind, int64_t stream_begin, const KvCache& cache,
                                   int64_t first_slot, int64_t n, PageTier tier) {
  const KvCacheShape& s = pages_.shape();
  if (tier == PageTier::kDisk)
    throw std::invalid_argument("KvUnitPool::add_from_cache: a resident tier only");
  if (cache.batch() != 1 || cache.dtype() != pages_.dtype() || cache.shape().layers != s.layers ||
      cache.shape().kv_heads != s.kv_heads || cache.shape().head_dim != s.head_dim ||
      first_slot < 0 || n < 0 || first_slot + n > cache.lengths()[0]) {
    throw std::invalid_argument(
        "KvUnitPool::add_from_cache: slots outside the cache, or a cache of another shape");
  }
  const at::Tensor positions = cache.positions().select(0, 0).narrow(0, first_slot, n).cpu();
  const int64_t id =
      reserve(std::move(kind), stream_begin,
              {positions.data_ptr<int64_t>(), positions.data_ptr<int64_t>() + n}, tier);
  PageTableRows rows;
  rows.add_unit(unit(id), first_slot, tier, pages_.page_tokens());
  if (rows.empty()) return id;
  try {
    const bool cuda = cache.device().is_cuda();
    const at::Tensor host = rows.host_tensor(cuda);
    const at::Tensor table = cuda ? host.to(cache.device(), /*non_blocking=*/true) : host;
    at::Tensor slab = pages_.slab(tier);
    for (int64_t l = 0; l < s.layers; ++l) {
      gpu::scatter_pages(slab, l, cache.keys(l)[0], cache.values(l)[0], table[0], table[1],
                         table[2]);
    }
  } catch (...) {
    remove(id);  // nothing half-written stays
    throw;
  }
  return id;
}

std::vector<PageRef> KvUnitPool::copy_pages(const std::vector<PageRef>& from, PageTier tier) {
  sync_device();
  std::vector<PageRef> copies = allocate(static_cast<int64_t>(from.size()), tier);
  try {
    for (size_t i = 0; i < copies.size(); ++i)
      pages_.write(copies[i], pages_.read(from[i]));
  } catch (...) {
    for (const PageRef& page : copies)
      pages_.release(page);
    throw;
  }
  return copies;
}

int64_t KvUnitPool::clone(int64_t id, PageTier tier) {
  KvUnit u = unit(id);
  u.id = next_id_;
  u.pages = copy_pages(u.pages, tier);
  units_.emplace(u.id, std::move(u));
  return next_id_++;
}

const KvUnit& KvUnitPool::unit(int64_t id) const {
  auto it = units_.find(id);
  if (it == units_.end()) throw std::out_of_range("no KV unit " + std::to_string(id));
  return it->second;
}

void KvUnitPool::move(int64_t id, PageTier tier) {
  KvUnit& u = const_cast<KvUnit&>(unit(id));
  if (u.tier() == tier) return;
  std::vector<PageRef> moved = copy_pages(u.pages, tier);  // on failure the unit stays whole
  for (const PageRef& page : u.pages)
    pages_.release(page);
  u.pages = std::move(moved);
}

at::Tensor KvUnitPool::read(int64_t id) const {
  const KvUnit& u = unit(id);
  sync_device();
  std::vector<at::Tensor> blocks;
  for (const PageRef& page : u.pages)
    blocks.push_back(pages_.read(page).to(at::kCPU));
  const KvCacheShape& s = pages_.shape();
  if (blocks.empty()) {
    return at::empty({s.layers, 2, s.kv_heads, 0, s.head_dim},
                     at::TensorOptions().dtype(pages_.dtype()));
  }
  return at::cat(blocks, 3).narrow(3, 0, u.tokens).contiguous();
}

void KvUnitPool::remove(int64_t id) {
  const KvUnit& u = unit(id);
  for (const PageRef& page : u.pages)
    pages_.release(page);
  units_.erase(id);
}

std::vector<int64_t> KvUnitPool::ids() const {
  std::vector<int64_t> out;
  for (const auto& [id, u] : units_)
    out.push_back(id);
  return out;
}

int64_t KvUnitPool::tokens_in(PageTier tier) const {
  int64_t n = 0;
  for (const auto& [id, u] : units_) {
    if (u.tier() == tier) n += u.tokens;
  }
  return n;
}

UnitLoadingKvSource::UnitLoadingKvSource(const KvUnitPool& pool, std::vector<int64_t> units,
                                         KvCache& cache, int64_t prefetch_depth)
    : pool_(pool),
      units_(std::move(units)),
      cache_(cache),
      plain_(cache),
      depth_(std::max<int64_t>(1, prefetch_depth)) {
  if (cache.batch() != 1) throw std::invalid_argument("UnitLoadingKvSource: one-row caches only");
  if (cache.dtype() != pool.pages().dtype() ||
      cache.shape().layers != pool.pages().shape().layers ||
      cache.shape().kv_heads != pool.pages().shape().kv_heads ||
      cache.shape().head_dim != pool.pages().shape().head_dim) {
    throw std::invalid_argument("UnitLoadingKvSource: the pool and the cache differ in shape");
  }
  for (int64_t id : units_) {
    if (pool.unit(id).tier() == PageTier::kDisk) {
      throw std::invalid_argument("UnitLoadingKvSource: unit " + std::to_string(id) +
                                  " is on disk; move it to the pinned pool first");
    }
  }
}

void PageTableRows::add_unit(const KvUnit& unit, int64_t first_slot, PageTier tier,
                             int64_t page_tokens) {
  int64_t next = first_slot;
  for (size_t i = 0; i < unit.pages.size(); ++i) {
    const int64_t n = std::min(page_tokens, unit.tokens - static_cast<int64_t>(i) * page_tokens);
    if (unit.pages[i].tier == tier) {
      page.push_back(unit.pages[i].index);
      slot.push_back(next);
      count.push_back(n);
    }
    next += n;
  }
}

at::Tensor PageTableRows::host_tensor(bool pinned) const {
  const auto n = static_cast<int64_t>(page.size());
  at::Tensor host = pinned ? gpu::empty_pinned({3, n}, at::kLong) : at::empty({3, n}, at::kLong);
  const std::vector<int64_t>* rows[3] = {&page, &slot, &count};
  for (int r = 0; r < 3; ++r)
    std::copy(rows[r]->begin(), rows[r]->end(), host[r].data_ptr<int64_t>());
  return host;
}

void UnitLoadingKvSource::claim(int64_t spare) {
  std::vector<int64_t> positions;
  for (int64_t id : units_) {
    const KvUnit& u = pool_.unit(id);
    positions.insert(positions.end(), u.positions.begin(), u.positions.end());
  }
  first_slot_ = cache_.claim(positions, spare);
  loaded_tokens_ = static_cast<int64_t>(positions.size());
  pending_ = false;
  done_marks_.assign(cache_.shape().layers, -1);
  // The page tables: each unit's tokens go to the slots after the previous unit's.
  tables_.clear();
  for (PageTier tier : {PageTier::kDevice, PageTier::kPinned}) {
    PageTableRows rows;
    int64_t slot = first_slot_;
    for (int64_t id : units_) {
      const KvUnit& u = pool_.unit(id);
      rows.add_unit(u, slot, tier, pool_.pages().page_tokens());
      slot += u.tokens;
    }
    if (rows.empty()) continue;
    at::Tensor host = rows.host_tensor(cache_.device().is_cuda());
    tables_.push_back({tier, host, {}});
  }
}

void UnitLoadingKvSource::load_now(gpu::DeviceTimeline& timeline, TraceRecorder* trace) {
  if (!pending_) return;
  claim(0);
  for (int64_t l = 0; l < cache_.shape().layers; ++l)
    issue(l, timeline, trace);
  for (int64_t l = 0; l < cache_.shape().layers; ++l)
    timeline.compute_wait(done_marks_[l]);
}

void UnitLoadingKvSource::begin_forward(const ForwardContext& ctx) {
  loading_ = pending_;
  if (loading_) claim(ctx.fresh_tokens);
  plain_.begin_forward(ctx);
  if (!loading_) return;
  for (int64_t l = 0; l < depth_; ++l)
    issue(l, *ctx.timeline, ctx.trace);
}

void UnitLoadingKvSource::issue(int64_t layer, gpu::DeviceTimeline& tl, TraceRecorder* trace) {
  if (layer >= cache_.shape().layers) return;
  const KvPagePool& pages = pool_.pages();
  const int64_t room = cache_.capacity() - cache_.max_length();
  at::Tensor keys = cache_.keys(layer, room).select(0, 0);  // [kv_heads, capacity, head_dim]
  at::Tensor values = cache_.values(layer, room).select(0, 0);
  const int64_t start = tl.mark(gpu::Lane::kCopy);
  // One gather per tier and layer on the copy lane (the first also brings the page tables).
  const int64_t last = tl.on_copy_lane([&] {
    for (PageTable& t : tables_) {
      if (!t.device.defined()) {
        t.device =
            cache_.device().is_cuda() ? t.host.to(cache_.device(), /*non_blocking=*/true) : t.host;
      }
      gpu::gather_pages(keys, values, pages.slab(t.tier), layer, t.device[0], t.device[1],
                        t.device[2]);
    }
  });
  const int64_t bytes = loaded_tokens_ * pages.layer_block_bytes() / pages.page_tokens();
  done_marks_[layer] = last;
  copied_bytes_ += bytes;
  if (trace) trace->add(layer, TraceLane::kCopy, "kv_copy", start, last, loaded_tokens_, bytes);
}

AttendKv UnitLoadingKvSource::layer_kv(int64_t layer, const FreshKv& fresh,
                                       const ForwardContext& ctx) {
  if (loading_) {
    issue(layer + depth_, *ctx.timeline, ctx.trace);
    ctx.timeline->compute_wait(done_marks_[layer]);
  }
  return plain_.layer_kv(layer, fresh, ctx);
}

void UnitLoadingKvSource::end_forward(const ForwardContext& ctx) {
  plain_.end_forward(ctx);
  loading_ = false;
}

}  // namespace engram
