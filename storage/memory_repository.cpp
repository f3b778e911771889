#include "storage/memory_repository.h"

#include "storage/database.h"
#include "storage/sqlite_statement.h"
#include "storage/store_error.h"

namespace engram::storage {

namespace {

constexpr const char* kSegmentColumns =
    "id, conversation_id, kind, key, text, version, changed_step";

MemorySegment read_segment(const Statement& row) {
  return {row.int64(0), row.optional_int64(1), row.text(2), row.text(3),
          row.text(4),  row.int64(5),          row.int64(6)};
}

std::string owner(std::optional<std::int64_t> conversation_id) {
  return conversation_id ? "conversation " + std::to_string(*conversation_id) : "world";
}

std::string segment_unit(std::optional<std::int64_t> conversation_id, const std::string& key) {
  return owner(conversation_id) + " memory segment '" + key + "'";
}

std::string group_unit(std::optional<std::int64_t> conversation_id, const std::string& key) {
  return owner(conversation_id) + " memory group '" + key + "'";
}

}  // namespace

MemoryRepository::MemoryRepository(Database& db) : db_(db) {}

MemorySegment MemoryRepository::upsert_segment(std::optional<std::int64_t> conversation_id,
                                               const std::string& kind, const std::string& key,
                                               const std::string& text, std::int64_t step) {
  const std::string unit = segment_unit(conversation_id, key);
  Transaction transaction(db_, unit);
  std::optional<MemorySegment> segment = find_segment(conversation_id, key);
  if (!segment) {
    Statement insert(db_,
                     "INSERT INTO memory_segments (conversation_id, kind, key, text, version, "
                     "changed_step) VALUES (?1, ?2, ?3, ?4, 1, ?5)",
                     unit);
    insert.bind(1, conversation_id).bind(2, kind).bind(3, key).bind(4, text).bind(5, step).run();
    segment = MemorySegment{db_.last_insert_id(), conversation_id, kind, key, text, 1, step};
  } else if (segment->text != text) {
    segment->kind = kind;
    segment->text = text;
    segment->version += 1;
    segment->changed_step = step;
    Statement update(db_,
                     "UPDATE memory_segments SET kind = ?2, text = ?3, version = ?4, "
                     "changed_step = ?5 WHERE id = ?1",
                     unit);
    update.bind(1, segment->id)
        .bind(2, kind)
        .bind(3, text)
        .bind(4, segment->version)
        .bind(5, step)
        .run();
  } else if (segment->kind != kind) {
    segment->kind = kind;
    Statement update(db_, "UPDATE memory_segments SET kind = ?2 WHERE id = ?1", unit);
    update.bind(1, segment->id).bind(2, kind).run();
  }
  transaction.commit();
  return *segment;
}

std::optional<MemorySegment> MemoryRepository::find_segment(
    std::optional<std::int64_t> conversation_id, const std::string& key) {
  Statement select(db_,
                   std::string("SELECT ") + kSegmentColumns +
                       " FROM memory_segments WHERE ifnull(conversation_id, 0) = ifnull(?1, 0) "
                       "AND key = ?2",
                   segment_unit(conversation_id, key));
  select.bind(1, conversation_id).bind(2, key);
  if (!select.step()) return std::nullopt;
  return read_segment(select);
}

MemorySegment MemoryRepository::load_segment(std::int64_t id) {
  const std::string unit = "memory segment " + std::to_string(id);
  Statement select(
      db_, std::string("SELECT ") + kSegmentColumns + " FROM memory_segments WHERE id = ?1", unit);
  select.bind(1, id);
  if (!select.step()) throw NotFound(db_.file(), unit, "no such memory segment");
  return read_segment(select);
}

std::vector<MemorySegment> MemoryRepository::segments(std::optional<std::int64_t> conversation_id) {
  Statement select(db_,
                   std::string("SELECT ") + kSegmentColumns +
                       " FROM memory_segments WHERE ifnull(conversation_id, 0) = ifnull(?1, 0) "
                       "ORDER BY id",
                   owner(conversation_id) + " memory");
  select.bind(1, conversation_id);
  std::vector<MemorySegment> result;
  while (select.step())
    result.push_back(read_segment(select));
  return result;
}

void MemoryRepository::remove_segment(std::int64_t id) {
  Statement drop(db_, "DELETE FROM memory_segments WHERE id = ?1",
                 "memory segment " + std::to_string(id));
  drop.bind(1, id).run();
}

std::vector<std::int64_t> MemoryRepository::group_members(std::int64_t group_id) {
  Statement select(db_,
                   "SELECT segment_id FROM memory_group_members WHERE group_id = ?1 "
                   "ORDER BY position",
                   "memory group " + std::to_string(group_id));
  select.bind(1, group_id);
  std::vector<std::int64_t> members;
  while (select.step())
    members.push_back(select.int64(0));
  return members;
}

MemoryGroup MemoryRepository::save_group(const MemoryGroup& group) {
  const std::string unit = group_unit(group.conversation_id, group.key);
  Transaction transaction(db_, unit);
  MemoryGroup stored = group;
  if (std::optional<MemoryGroup> existing = find_group(group.conversation_id, group.key)) {
    stored.id = existing->id;
    Statement update(db_, "UPDATE memory_groups SET state = ?2 WHERE id = ?1", unit);
    update.bind(1, stored.id).bind(2, to_string(group.state)).run();
    Statement clear(db_, "DELETE FROM memory_group_members WHERE group_id = ?1", unit);
    clear.bind(1, stored.id).run();
  } else {
    Statement insert(
        db_, "INSERT INTO memory_groups (conversation_id, key, state) VALUES (?1, ?2, ?3)", unit);
    insert.bind(1, group.conversation_id).bind(2, group.key).bind(3, to_string(group.state)).run();
    stored.id = db_.last_insert_id();
  }
  Statement member(db_,
                   "INSERT INTO memory_group_members (group_id, segment_id, position) "
                   "VALUES (?1, ?2, ?3)",
                   unit);
  for (std::size_t i = 0; i < group.segment_ids.size(); ++i) {
    member.reset();
    member.bind(1, stored.id).bind(2, group.segment_ids[i]).bind(3, static_cast<std::int64_t>(i));
    member.run();
  }
  transaction.commit();
  return stored;
}

void MemoryRepository::set_group_state(std::int64_t group_id, GroupState state) {
  const std::string unit = "memory group " + std::to_string(group_id);
  Statement update(db_, "UPDATE memory_groups SET state = ?2 WHERE id = ?1", unit);
  update.bind(1, group_id).bind(2, to_string(state)).run();
  if (db_.changes() == 0) throw NotFound(db_.file(), unit, "no such memory group");
}

std::optional<MemoryGroup> MemoryRepository::find_group(std::optional<std::int64_t> conversation_id,
                                                        const std::string& key) {
  Statement select(db_,
                   "SELECT id, state FROM memory_groups WHERE ifnull(conversation_id, 0) = "
                   "ifnull(?1, 0) AND key = ?2",
                   group_unit(conversation_id, key));
  select.bind(1, conversation_id).bind(2, key);
  if (!select.step()) return std::nullopt;
  MemoryGroup group{
      select.int64(0), conversation_id, key, group_state_from_string(select.text(1)), {}};
  group.segment_ids = group_members(group.id);
  return group;
}

std::vector<MemoryGroup> MemoryRepository::groups(std::optional<std::int64_t> conversation_id) {
  Statement select(db_,
                   "SELECT id, key, state FROM memory_groups WHERE ifnull(conversation_id, 0) = "
                   "ifnull(?1, 0) ORDER BY id",
                   owner(conversation_id) + " memory groups");
  select.bind(1, conversation_id);
  std::vector<MemoryGroup> result;
  while (select.step()) {
    result.push_back({select.int64(0),
                      conversation_id,
                      select.text(1),
                      group_state_from_string(select.text(2)),
                      {}});
  }
  for (MemoryGroup& group : result)
    group.segment_ids = group_members(group.id);
  return result;
}

void MemoryRepository::remove_group(std::int64_t id) {
  Statement drop(db_, "DELETE FROM memory_groups WHERE id = ?1",
                 "memory group " + std::to_string(id));
  drop.bind(1, id).run();
}

}  // namespace engram::storage
