#include "storage/schema.h"

#include <string>

#include "core/log.h"
#include "storage/database.h"

namespace engram::storage {

namespace {

// Conventions: ids are rowids; times are Unix milliseconds; a NULL conversation_id means world
// memory. Uniqueness "per conversation or world" uses ifnull(conversation_id, 0) because SQLite
// treats NULLs as distinct in UNIQUE constraints. Child tables index their foreign keys so that
// cascading deletes do not scan.
constexpr const char* kVersion1 = R"sql(
CREATE TABLE conversations (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL
);
CREATE TABLE utterances (
  conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
  idx INTEGER NOT NULL,
  role TEXT NOT NULL,
  text TEXT NOT NULL,
  time_ms INTEGER NOT NULL,
  token_begin INTEGER NOT NULL,
  token_end INTEGER NOT NULL,
  PRIMARY KEY (conversation_id, idx),
  CHECK (token_begin <= token_end)
);
CREATE TABLE memory_segments (
  id INTEGER PRIMARY KEY,
  conversation_id INTEGER REFERENCES conversations(id) ON DELETE CASCADE,
  kind TEXT NOT NULL,
  key TEXT NOT NULL,
  text TEXT NOT NULL,
  version INTEGER NOT NULL,
  changed_step INTEGER NOT NULL
);
CREATE UNIQUE INDEX memory_segments_key ON memory_segments (ifnull(conversation_id, 0), key);
CREATE INDEX memory_segments_conversation ON memory_segments (conversation_id);
CREATE TABLE memory_groups (
  id INTEGER PRIMARY KEY,
  conversation_id INTEGER REFERENCES conversations(id) ON DELETE CASCADE,
  key TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('static', 'dynamic'))
);
CREATE UNIQUE INDEX memory_groups_key ON memory_groups (ifnull(conversation_id, 0), key);
CREATE INDEX memory_groups_conversation ON memory_groups (conversation_id);
CREATE TABLE memory_group_members (
  group_id INTEGER NOT NULL REFERENCES memory_groups(id) ON DELETE CASCADE,
  segment_id INTEGER NOT NULL REFERENCES memory_segments(id) ON DELETE CASCADE,
  position INTEGER NOT NULL,
  PRIMARY KEY (group_id, segment_id)
);
CREATE INDEX memory_group_members_segment ON memory_group_members (segment_id);
CREATE TABLE episodes (
  id INTEGER PRIMARY KEY,
  conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
  idx INTEGER NOT NULL,
  centroid BLOB NOT NULL,
  medoid_segment_id INTEGER REFERENCES memory_segments(id) ON DELETE SET NULL,
  layer_budget TEXT NOT NULL,
  UNIQUE (conversation_id, idx)
);
CREATE INDEX episodes_medoid ON episodes (medoid_segment_id);
CREATE TABLE episode_members (
  episode_id INTEGER NOT NULL REFERENCES episodes(id) ON DELETE CASCADE,
  segment_id INTEGER NOT NULL REFERENCES memory_segments(id) ON DELETE CASCADE,
  position INTEGER NOT NULL,
  PRIMARY KEY (episode_id, segment_id)
);
CREATE INDEX episode_members_segment ON episode_members (segment_id);
CREATE TABLE embeddings (
  conversation_id INTEGER REFERENCES conversations(id) ON DELETE CASCADE,
  owner_kind TEXT NOT NULL,
  owner_id INTEGER NOT NULL,
  model TEXT NOT NULL,
  vector BLOB NOT NULL
);
CREATE UNIQUE INDEX embeddings_owner
  ON embeddings (ifnull(conversation_id, 0), owner_kind, owner_id, model);
CREATE INDEX embeddings_conversation ON embeddings (conversation_id);
CREATE TABLE kv_blobs (
  id INTEGER PRIMARY KEY,
  conversation_id INTEGER REFERENCES conversations(id) ON DELETE CASCADE,
  unit_kind TEXT NOT NULL,
  unit_id INTEGER NOT NULL,
  layer_begin INTEGER NOT NULL,
  layer_end INTEGER NOT NULL,
  dtype TEXT NOT NULL,
  shape TEXT NOT NULL,
  positions BLOB NOT NULL,
  file TEXT NOT NULL UNIQUE,
  byte_size INTEGER NOT NULL,
  checksum INTEGER NOT NULL,
  model_fingerprint TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  CHECK (0 <= layer_begin AND layer_begin < layer_end)
);
CREATE UNIQUE INDEX kv_blobs_unit
  ON kv_blobs (ifnull(conversation_id, 0), unit_kind, unit_id, layer_begin, layer_end);
CREATE INDEX kv_blobs_conversation ON kv_blobs (conversation_id);
)sql";

constexpr const char* kVersion2 = R"sql(
ALTER TABLE conversations ADD COLUMN model_fingerprint TEXT NOT NULL DEFAULT '';
)sql";

constexpr const char* kVersion3 = R"sql(
ALTER TABLE conversations ADD COLUMN memory_policy TEXT NOT NULL DEFAULT '';
ALTER TABLE conversations ADD COLUMN kv_budget INTEGER NOT NULL DEFAULT 0 CHECK (kv_budget >= 0);
)sql";

constexpr Migration kMigrations[] = {
    {1, "conversations, utterances, memory, episodes, embeddings and the KV blob index", kVersion1},
    {2, "conversations remember the model fingerprint they were last run with", kVersion2},
    {3, "conversations keep their memory policy and KV budget", kVersion3},
};

}  // namespace

std::span<const Migration> schema_migrations() {
  return kMigrations;
}

int current_schema_version() {
  return kMigrations[std::size(kMigrations) - 1].version;
}

void migrate(Database& db) {
  for (const Migration& step : kMigrations) {
    if (step.version <= db.schema_version()) continue;
    Transaction transaction(db, "schema migration to version " + std::to_string(step.version));
    db.exec(step.sql, "schema migration to version " + std::to_string(step.version));
    // user_version is part of the database header and so part of the same transaction.
    db.exec("PRAGMA user_version = " + std::to_string(step.version));
    transaction.commit();
    log::info("storage: " + db.file() + " migrated to schema version " +
              std::to_string(step.version) + " (" + step.purpose + ")");
  }
}

}  // namespace engram::storage
