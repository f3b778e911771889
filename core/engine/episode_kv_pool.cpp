#include "core/engine/episode_kv_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gpu/device_timeline.h"

namespace engram {
namespace {

KvPagePoolOptions page_options(int64_t capacity, const EpisodeKvPoolOptions& o) {
  if (o.page_tokens <= 0 || o.pinned_episodes < 1 || o.max_units_per_episode < 1)
    throw std::invalid_argument("EpisodeKvPool: page size, episodes and units must be positive");
  KvPagePoolOptions p;
  p.page_tokens = o.page_tokens;
  p.device_pages = 0;  // waiting episodes never hold GPU memory
  // Each unit's last page is partly filled: room for a working set in as many units as allowed.
  const int64_t per_episode =
      (capacity + o.page_tokens - 1) / o.page_tokens + o.max_units_per_episode;
  p.pinned_pages = o.pinned_episodes * per_episode;
  p.spill_dir = o.spill_dir.empty() ? std::filesystem::temp_directory_path() / "engram-kv-spill"
                                    : o.spill_dir;
  return p;
}

}  // namespace

EpisodeKvPool::EpisodeKvPool(KvCacheShape shape, at::ScalarType dtype, at::Device device,
                             int64_t capacity, EpisodeKvPoolOptions options)
    : pages_(shape, dtype, device, page_options(capacity, options)),
      units_(pages_),
      options_(std::move(options)) {}

int64_t EpisodeKvPool::unit_tokens(const Stored& s) const {
  int64_t n = 0;
  for (int64_t id : s.units)
    n += units_.unit(id).tokens;
  return n;
}

void EpisodeKvPool::remove_unit(int64_t id) {
  units_.remove(id);
  persisted_.erase(id);
}

void EpisodeKvPool::remove_units(Stored& s) {
  for (int64_t id : s.units)
    remove_unit(id);
  s.units.clear();
  s.live = false;
}

bool EpisodeKvPool::make_room(int64_t pages, int32_t keep) {
  const int64_t capacity = pages_.capacity(PageTier::kPinned);
  while (capacity - pages_.in_use(PageTier::kPinned) < pages) {
    // The least recently used other episode with units in the pinned tier goes to disk.
    Stored* victim = nullptr;
    for (auto& [e, s] : episodes_) {
      if (e == keep) continue;
      const bool pinned = std::any_of(s.units.begin(), s.units.end(), [&](int64_t id) {
        return units_.unit(id).tier() == PageTier::kPinned;
      });
      if (pinned && (!victim || s.used < victim->used)) victim = &s;
    }
    if (!victim) return false;
    for (int64_t id : victim->units) {
      if (units_.unit(id).tier() != PageTier::kPinned) continue;
      units_.move(id, PageTier::kDisk);
      spilled_tokens_ += units_.unit(id).tokens;
    }
  }
  return true;
}

void EpisodeKvPool::need_room(int64_t pages, int32_t keep) {
  if (!make_room(pages, keep)) {
    throw std::runtime_error("episode KV: " + std::to_string(pages) +
                             " pages do not fit beside the episode in the pinned pool of " +
                             std::to_string(pages_.capacity(PageTier::kPinned)) + " pages");
  }
}

std::pair<size_t, int64_t> EpisodeKvPool::kept_units(const Stored& s,
                                                     const KvWorkingSet& ws) const {
  // Units wholly inside the slots unchanged since this episode was loaded stay; the rest go.
  size_t keep = 0;
  int64_t kept = 0;
  if (s.live && static_cast<int64_t>(s.units.size()) < options_.max_units_per_episode) {
    const int64_t unchanged = std::min(ws.unchanged_slots(), ws.tokens());
    while (keep < s.units.size() && kept + units_.unit(s.units[keep]).tokens <= unchanged)
      kept += units_.unit(s.units[keep++]).tokens;
  }
  return {keep, kept};
}

int64_t EpisodeKvPool::unwritten(int32_t episode, const KvWorkingSet& ws) const {
  const auto it = episodes_.find(episode);
  if (it == episodes_.end()) return ws.tokens();
  return ws.tokens() - kept_units(it->second, ws).second;
}

void EpisodeKvPool::write_back(int32_t episode, const KvWorkingSet& ws) {
  Stored& s = episodes_[episode];
  const int64_t n = ws.tokens();
  if (n == 0) {
    drop(episode);
    return;
  }
  const auto [keep, kept] = kept_units(s, ws);
  for (size_t i = keep; i < s.units.size(); ++i)
    remove_unit(s.units[i]);
  s.units.resize(keep);
  if (kept < n) {
    // Spilled units of this episode come back first: a working set is loaded from the pinned
    // tier, so the whole episode must fit there.
    for (int64_t id : s.units) {
      if (units_.unit(id).tier() == PageTier::kDisk) {
        need_room(static_cast<int64_t>(units_.unit(id).pages.size()), episode);
        units_.move(id, PageTier::kPinned);
      }
    }
    need_room(units_.pages_for(n - kept), episode);
    s.units.push_back(
        units_.add_from_cache("episode", -1, ws.cache(), kept, n - kept, PageTier::kPinned));
    written_tokens_ += n - kept;
  }
  s.layout = ws.layout();
  s.used = ++clock_;
  s.live = false;
}

bool EpisodeKvPool::load(int32_t episode, KvWorkingSet& ws) {
  ws.clear();
  for (auto& [e, s] : episodes_)
    s.live = false;
  auto it = episodes_.find(episode);
  if (it == episodes_.end() || it->second.units.empty()) return false;
  Stored& s = it->second;
  for (int64_t id : s.units) {
    if (units_.unit(id).tier() != PageTier::kDisk) continue;
    need_room(static_cast<int64_t>(units_.unit(id).pages.size()), episode);
    units_.move(id, PageTier::kPinned);
  }
  gpu::DeviceTimeline timeline(ws.cache().device());
  UnitLoadingKvSource loader(units_, s.units, ws.cache());
  loader.load_now(timeline);
  ws.restore(s.layout);
  ws.mark_unchanged();
  s.used = ++clock_;
  s.live = true;
  return true;
}

void EpisodeKvPool::copy(int32_t from, int32_t to) {
  if (from == to) return;
  drop(to);
  auto it = episodes_.find(from);
  if (it == episodes_.end() || it->second.units.empty()) return;
  const Stored& source = it->second;
  Stored copy;
  copy.layout = source.layout;
  for (int64_t id : source.units) {
    // Where the pinned tier cannot hold the copy beside its source, the copy waits on disk.
    const bool room = make_room(static_cast<int64_t>(units_.unit(id).pages.size()), from);
    copy.units.push_back(units_.clone(id, room ? PageTier::kPinned : PageTier::kDisk));
    written_tokens_ += units_.unit(id).tokens;
  }
  copy.used = ++clock_;
  episodes_[to] = std::move(copy);
}

void EpisodeKvPool::drop(int32_t episode) {
  auto it = episodes_.find(episode);
  if (it == episodes_.end()) return;
  remove_units(it->second);
  episodes_.erase(it);
}

void EpisodeKvPool::clear() {
  for (auto& [e, s] : episodes_)
    remove_units(s);
  episodes_.clear();
}

void EpisodeKvPool::checkpoint(int32_t episode, KvWorkingSet& ws) {
  write_back(episode, ws);
  if (ws.tokens() == 0) return;
  for (auto& [e, s] : episodes_)
    s.live = false;
  episodes_.at(episode).live = true;
  ws.mark_unchanged();
}

void EpisodeKvPool::adopt(int32_t episode, const std::vector<EpisodeKvUnit>& units,
                          const WorkingSetLayout& layout) {
  int64_t tokens = 0;
  for (const EpisodeKvUnit& u : units)
    tokens += static_cast<int64_t>(u.positions.size());
  if (tokens != layout.tokens || tokens == 0) {
    throw std::invalid_argument("EpisodeKvPool::adopt: units of " + std::to_string(tokens) +
                                " tokens for a layout of " + std::to_string(layout.tokens));
  }
  drop(episode);
  Stored s;
  try {
    for (const EpisodeKvUnit& u : units) {
      const bool room =
          make_room(units_.pages_for(static_cast<int64_t>(u.positions.size())), episode);
      s.units.push_back(
          units_.add("episode", -1, u.kv, u.positions, room ? PageTier::kPinned : PageTier::kDisk));
      persisted_[s.units.back()] = u.checksum;
    }
  } catch (...) {
    remove_units(s);
    throw;
  }
  s.layout = layout;
  s.used = ++clock_;
  episodes_[episode] = std::move(s);
}

const EpisodeKvPool::Stored& EpisodeKvPool::stored(int32_t episode) const {
  auto it = episodes_.find(episode);
  if (it == episodes_.end())
    throw std::out_of_range("EpisodeKvPool: episode " + std::to_string(episode) + " has no KV");
  return it->second;
}

std::vector<int32_t> EpisodeKvPool::episodes() const {
  std::vector<int32_t> out;
  for (const auto& [e, s] : episodes_)
    if (!s.units.empty()) out.push_back(e);
  return out;
}

const std::vector<int64_t>& EpisodeKvPool::episode_units(int32_t episode) const {
  return stored(episode).units;
}

const WorkingSetLayout& EpisodeKvPool::episode_layout(int32_t episode) const {
  return stored(episode).layout;
}

std::optional<uint64_t> EpisodeKvPool::persisted(int64_t unit) const {
  auto it = persisted_.find(unit);
  if (it == persisted_.end()) return std::nullopt;
  return it->second;
}

bool EpisodeKvPool::has(int32_t episode) const {
  auto it = episodes_.find(episode);
  return it != episodes_.end() && !it->second.units.empty();
}

int64_t EpisodeKvPool::tokens(int32_t episode) const {
  auto it = episodes_.find(episode);
  return it == episodes_.end() ? 0 : unit_tokens(it->second);
}

std::vector<EpisodeKvPlace> EpisodeKvPool::places() const {
  std::vector<EpisodeKvPlace> out;
  for (const auto& [e, s] : episodes_) {
    EpisodeKvPlace p;
    p.episode = e;
    p.tokens = unit_tokens(s);
    p.units = static_cast<int64_t>(s.units.size());
    p.tier = PageTier::kPinned;
    for (int64_t id : s.units) {
      if (units_.unit(id).tier() == PageTier::kDisk) p.tier = PageTier::kDisk;
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace engram
