// EpiCache episodes of a conversation: centroid, medoid segment, per-layer KV budget and member
// segments. An episode keeps its id when it is saved again, because its KV blobs are keyed by
// that id (unit kind "episode" by the engine's convention).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "storage/records.h"

namespace engram::storage {

class Database;

class EpisodeRepository {
 public:
  explicit EpisodeRepository(Database& db);

  // Inserts the episode or replaces centroid, medoid, budget and members of the one with the
  // same (conversation, index). Returns it with its id.
  Episode save(const Episode& episode);
  std::optional<Episode> find(std::int64_t conversation_id, std::int64_t index);
  std::vector<Episode> list(std::int64_t conversation_id);  // by index
  // Removes the row only; the engine removes the episode's blobs (KvBlobStore::remove_unit).
  void remove(std::int64_t episode_id);

 private:
  Database& db_;
};

}  // namespace engram::storage
