// Embodied memory (KEEP): segments with stable keys and versions, and the static/dynamic groups
// they belong to. A segment's version counts changes of its text, so an unchanged upsert keeps
// version and changed_step and the KV cached for it stays valid.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "storage/records.h"

namespace engram::storage {

class Database;

class MemoryRepository {
 public:
  explicit MemoryRepository(Database& db);

  // Inserts the segment (version 1, changed_step = step) or updates the one with the same
  // (conversation, key): the kind is overwritten; version + 1 and changed_step = step only when
  // the text differs. Returns the stored segment.
  MemorySegment upsert_segment(std::optional<std::int64_t> conversation_id, const std::string& kind,
                               const std::string& key, const std::string& text, std::int64_t step);
  std::optional<MemorySegment> find_segment(std::optional<std::int64_t> conversation_id,
                                            const std::string& key);
  MemorySegment load_segment(std::int64_t id);  // throws NotFound
  // The segments of a conversation, or of world memory when conversation_id is empty; by id.
  std::vector<MemorySegment> segments(std::optional<std::int64_t> conversation_id);
  void remove_segment(std::int64_t id);  // also leaves its groups and episodes

  // Inserts the group or replaces state and members of the one with the same (conversation,
  // key); members must be segments of the same profile. Returns it with its id.
  MemoryGroup save_group(const MemoryGroup& group);
  void set_group_state(std::int64_t group_id, GroupState state);
  std::optional<MemoryGroup> find_group(std::optional<std::int64_t> conversation_id,
                                        const std::string& key);
  std::vector<MemoryGroup> groups(std::optional<std::int64_t> conversation_id);
  void remove_group(std::int64_t id);

 private:
  std::vector<std::int64_t> group_members(std::int64_t group_id);

  Database& db_;
};

}  // namespace engram::storage
