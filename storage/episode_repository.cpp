#include "storage/episode_repository.h"

#include <nlohmann/json.hpp>

#include "storage/database.h"
#include "storage/sqlite_statement.h"
#include "storage/store_error.h"

namespace engram::storage {

namespace {

std::string episode_unit(std::int64_t conversation_id, std::int64_t index) {
  return "conversation " + std::to_string(conversation_id) + " episode " + std::to_string(index);
}

constexpr const char* kColumns =
    "id, conversation_id, idx, centroid, medoid_segment_id, layer_budget";

}  // namespace

EpisodeRepository::EpisodeRepository(Database& db) : db_(db) {}

Episode EpisodeRepository::save(const Episode& episode) {
  const std::string unit = episode_unit(episode.conversation_id, episode.index);
  Transaction transaction(db_, unit);
  Episode stored = episode;
  const std::string budget = nlohmann::json(episode.layer_budget).dump();
  Statement existing(db_, "SELECT id FROM episodes WHERE conversation_id = ?1 AND idx = ?2", unit);
  existing.bind(1, episode.conversation_id).bind(2, episode.index);
  if (existing.step()) {
    stored.id = existing.int64(0);
    Statement update(db_,
                     "UPDATE episodes SET centroid = ?2, medoid_segment_id = ?3, "
                     "layer_budget = ?4 WHERE id = ?1",
                     unit);
    update.bind(1, stored.id)
        .bind_floats(2, episode.centroid)
        .bind(3, episode.medoid_segment_id)
        .bind(4, budget)
        .run();
    Statement clear(db_, "DELETE FROM episode_members WHERE episode_id = ?1", unit);
    clear.bind(1, stored.id).run();
  } else {
    Statement insert(db_,
                     "INSERT INTO episodes (conversation_id, idx, centroid, medoid_segment_id, "
                     "layer_budget) VALUES (?1, ?2, ?3, ?4, ?5)",
                     unit);
    insert.bind(1, episode.conversation_id)
        .bind(2, episode.index)
        .bind_floats(3, episode.centroid)
        .bind(4, episode.medoid_segment_id)
        .bind(5, budget)
        .run();
    stored.id = db_.last_insert_id();
  }
  Statement member(
      db_, "INSERT INTO episode_members (episode_id, segment_id, position) VALUES (?1, ?2, ?3)",
      unit);
  for (std::size_t i = 0; i < episode.segment_ids.size(); ++i) {
    member.reset();
    member.bind(1, stored.id)
        .bind(2, episode.segment_ids[i])
        .bind(3, static_cast<std::int64_t>(i))
        .run();
  }
  transaction.commit();
  return stored;
}

namespace {

Episode read_episode(Database& db, const Statement& row) {
  Episode episode;
  episode.id = row.int64(0);
  episode.conversation_id = row.int64(1);
  episode.index = row.int64(2);
  episode.centroid = row.floats(3);
  episode.medoid_segment_id = row.optional_int64(4);
  const std::string unit = episode_unit(episode.conversation_id, episode.index);
  try {
    episode.layer_budget = nlohmann::json::parse(row.text(5)).get<std::vector<std::int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    throw DatabaseCorrupt(db.file(), unit,
                          std::string("layer budget is not a JSON array of integers: ") + e.what());
  }
  Statement members(db,
                    "SELECT segment_id FROM episode_members WHERE episode_id = ?1 "
                    "ORDER BY position",
                    unit);
  members.bind(1, episode.id);
  while (members.step())
    episode.segment_ids.push_back(members.int64(0));
  return episode;
}

}  // namespace

std::optional<Episode> EpisodeRepository::find(std::int64_t conversation_id, std::int64_t index) {
  Statement select(
      db_,
      std::string("SELECT ") + kColumns + " FROM episodes WHERE conversation_id = ?1 AND idx = ?2",
      episode_unit(conversation_id, index));
  select.bind(1, conversation_id).bind(2, index);
  if (!select.step()) return std::nullopt;
  return read_episode(db_, select);
}

std::vector<Episode> EpisodeRepository::list(std::int64_t conversation_id) {
  Statement select(
      db_,
      std::string("SELECT ") + kColumns + " FROM episodes WHERE conversation_id = ?1 ORDER BY idx",
      "conversation " + std::to_string(conversation_id) + " episodes");
  select.bind(1, conversation_id);
  std::vector<Episode> result;
  while (select.step())
    result.push_back(read_episode(db_, select));
  return result;
}

void EpisodeRepository::remove(std::int64_t episode_id) {
  Statement drop(db_, "DELETE FROM episodes WHERE id = ?1",
                 "episode " + std::to_string(episode_id));
  drop.bind(1, episode_id).run();
}

}  // namespace engram::storage
