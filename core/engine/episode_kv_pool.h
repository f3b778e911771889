// Episodes waiting for their turn (EpiCache in a chat, core/engine/chat_session.h) as units of
// the paged pool (core/kv/kv_unit_pool.h): only the routed episode's cache sits in the session's
// working set on the GPU; every other episode's KV is a list of units in the pinned host tier,
// and when the pinned tier is full the least recently used episode's units move to the disk tier
// (the spill file) and come back when it is routed to again.
//
// Write-back is append-only: a working set loaded from an episode's units keeps its slots until a
// plan compacts them (KvWorkingSet::unchanged_slots), so writing the episode back adds one unit
// for the slots after the unchanged prefix and leaves the stored pages alone; only after a plan
// (or for a new episode) is the whole set written. A switch is one page-scatter per layer out
// (on the compute stream) and one page-gather per layer in (on the copy stream, the compute
// stream waits for it): no host round trip, no allocation after the pool's slabs.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "core/kv/kv_unit_pool.h"
#include "core/kv/working_set.h"

namespace engram {

struct EpisodeKvPoolOptions {
  int64_t page_tokens = 64;
  int64_t pinned_episodes = 4;        // working sets the pinned tier holds before episodes spill
  std::filesystem::path spill_dir;    // empty: the system's temporary folder
  int64_t max_units_per_episode = 4;  // more appended units: the next write-back rewrites all
};

// Where one episode's KV is, for the memory inspector and the episodes panel.
struct EpisodeKvPlace {
  int32_t episode = -1;
  int64_t tokens = 0;
  int64_t units = 0;
  PageTier tier = PageTier::kPinned;
};

// One unit of an episode as a store holds it: its KV and positions, and the checksum of the
// blob it came from (the unit counts as stored under it).
struct EpisodeKvUnit {
  at::Tensor kv;  // [layers, 2, kv_heads, n, head_dim], the pool's dtype, any device
  std::vector<int64_t> positions;
  uint64_t checksum = 0;
};

class EpisodeKvPool {
 public:
  // Episodes of working sets of `capacity` slots of `shape`/`dtype` computed on `device`.
  EpisodeKvPool(KvCacheShape shape, at::ScalarType dtype, at::Device device, int64_t capacity,
                EpisodeKvPoolOptions options = {});

  // Stores `ws` as episode `episode`'s KV (see the header comment: appends after the slots
  // unchanged since the episode was loaded). An empty working set drops the episode's KV.
  void write_back(int32_t episode, const KvWorkingSet& ws);
  // Tokens write_back(episode, ws) would write now (all of them after a plan moved the slots).
  int64_t unwritten(int32_t episode, const KvWorkingSet& ws) const;
  // Puts episode `episode` into `ws` (cleared first; spilled units come back from the disk
  // first). Returns false, leaving `ws` empty, when the episode has no KV stored.
  bool load(int32_t episode, KvWorkingSet& ws);
  // Episode `to` starts as a copy of what `from` holds (a new topic starts from the nearest
  // episode's cache).
  void copy(int32_t from, int32_t to);
  void drop(int32_t episode);
  void clear();

  // Persistence (core/engine/episode_kv_store.h). checkpoint() writes `ws` back as episode
  // `episode` (appending like write_back()) and keeps it live: the working set then counts as
  // loaded from those units (mark_unchanged), so a later write-back or save adds only what
  // changes after it.
  void checkpoint(int32_t episode, KvWorkingSet& ws);
  // Episode `episode` becomes `units` (in slot order; their tokens add up to layout.tokens),
  // each tagged as stored under its checksum. Units go to the pinned tier while it has room
  // (least recently used episodes spill), else to the disk tier.
  void adopt(int32_t episode, const std::vector<EpisodeKvUnit>& units,
             const WorkingSetLayout& layout);
  // The episodes holding KV, ascending; one's units in slot order and its layout.
  std::vector<int32_t> episodes() const;
  const std::vector<int64_t>& episode_units(int32_t episode) const;
  const WorkingSetLayout& episode_layout(int32_t episode) const;
  // The checksum a store wrote unit `unit` under; none once the unit is gone or never stored.
  void set_persisted(int64_t unit, uint64_t checksum) { persisted_[unit] = checksum; }
  std::optional<uint64_t> persisted(int64_t unit) const;

  bool has(int32_t episode) const;
  int64_t tokens(int32_t episode) const;  // 0 when nothing is stored
  std::vector<EpisodeKvPlace> places() const;
  // Tokens written into pages so far (write-backs and copies) and moved to the disk tier: what
  // append-only write-back saves shows here.
  int64_t written_tokens() const { return written_tokens_; }
  int64_t spilled_tokens() const { return spilled_tokens_; }
  const KvUnitPool& units() const { return units_; }

 private:
  struct Stored {
    std::vector<int64_t> units;  // in slot order
    WorkingSetLayout layout;
    int64_t used = 0;   // the clock at its last load or write-back (least recently used spills)
    bool live = false;  // the session's working set was loaded from these units
  };
  int64_t unit_tokens(const Stored& s) const;
  // How many of `s`'s units (from the first) and their tokens a write-back of `ws` keeps.
  std::pair<size_t, int64_t> kept_units(const Stored& s, const KvWorkingSet& ws) const;
  const Stored& stored(int32_t episode) const;
  void remove_unit(int64_t id);  // and its persisted tag
  void remove_units(Stored& s);
  // Frees `pages` pinned pages by moving least recently used episodes (never `keep`) to disk;
  // false when only `keep` is left to move. need_room throws then.
  bool make_room(int64_t pages, int32_t keep);
  void need_room(int64_t pages, int32_t keep);

  KvPagePool pages_;
  KvUnitPool units_;
  EpisodeKvPoolOptions options_;
  std::map<int32_t, Stored> episodes_;
  std::map<int64_t, uint64_t> persisted_;  // unit -> checksum of the blob a store wrote it to
  int64_t clock_ = 0;
  int64_t written_tokens_ = 0;
  int64_t spilled_tokens_ = 0;
};

}  // namespace engram
