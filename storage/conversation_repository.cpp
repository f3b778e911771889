#include "storage/conversation_repository.h"

#include <filesystem>

#include "storage/clock.h"
#include "storage/database.h"
#include "storage/durable_file.h"
#include "storage/sqlite_statement.h"
#include "storage/store_error.h"

namespace engram::storage {

namespace {

constexpr const char* kColumns =
    "id, name, created_ms, updated_ms, model_fingerprint, memory_policy, kv_budget";

Conversation read_conversation(const Statement& row) {
  return {row.int64(0), row.text(1), row.int64(2), row.int64(3),
          row.text(4),  row.text(5), row.int64(6)};
}

// LIKE treats % and _ as wildcards; a search for "50%" must find the literal text.
std::string like_pattern(const std::string& text) {
  std::string pattern = "%";
  for (char c : text) {
    if (c == '%' || c == '_' || c == '\\') pattern += '\\';
    pattern += c;
  }
  return pattern + "%";
}

}  // namespace

ConversationRepository::ConversationRepository(Database& db) : db_(db) {}

std::string ConversationRepository::unit(std::int64_t id) const {
  return "conversation " + std::to_string(id);
}

Conversation ConversationRepository::create(const std::string& name,
                                            const std::string& model_fingerprint) {
  const std::string unit_name = "conversation '" + name + "'";
  if (name.empty()) throw StoreError(db_.file(), unit_name, "a conversation needs a name");
  Transaction transaction(db_, unit_name);
  if (find_by_name(name)) {
    throw StoreError(db_.file(), unit_name, "a conversation with this name already exists");
  }
  const std::int64_t now = unix_now_ms();
  Statement insert(db_,
                   "INSERT INTO conversations (name, created_ms, updated_ms, model_fingerprint) "
                   "VALUES (?1, ?2, ?2, ?3)",
                   unit_name);
  insert.bind(1, name).bind(2, now).bind(3, model_fingerprint).run();
  Conversation conversation{db_.last_insert_id(), name, now, now, model_fingerprint, {}, 0};
  transaction.commit();
  return conversation;
}

Conversation ConversationRepository::insert(const Conversation& conversation) {
  const std::string unit_name = "conversation '" + conversation.name + "'";
  if (conversation.name.empty())
    throw StoreError(db_.file(), unit_name, "a conversation needs a name");
  if (conversation.kv_budget < 0)
    throw StoreError(db_.file(), unit_name, "a KV budget must not be negative");
  Transaction transaction(db_, unit_name);
  if (find_by_name(conversation.name)) {
    throw StoreError(db_.file(), unit_name, "a conversation with this name already exists");
  }
  Statement insert(db_,
                   "INSERT INTO conversations (name, created_ms, updated_ms, model_fingerprint, "
                   "memory_policy, kv_budget) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                   unit_name);
  insert.bind(1, conversation.name)
      .bind(2, conversation.created_ms)
      .bind(3, conversation.updated_ms)
      .bind(4, conversation.model_fingerprint)
      .bind(5, conversation.memory_policy)
      .bind(6, conversation.kv_budget)
      .run();
  Conversation stored = conversation;
  stored.id = db_.last_insert_id();
  transaction.commit();
  return stored;
}

std::optional<Conversation> ConversationRepository::find(std::int64_t id) {
  Statement select(db_, std::string("SELECT ") + kColumns + " FROM conversations WHERE id = ?1",
                   unit(id));
  select.bind(1, id);
  if (!select.step()) return std::nullopt;
  return read_conversation(select);
}

std::optional<Conversation> ConversationRepository::find_by_name(const std::string& name) {
  Statement select(db_, std::string("SELECT ") + kColumns + " FROM conversations WHERE name = ?1",
                   "conversation '" + name + "'");
  select.bind(1, name);
  if (!select.step()) return std::nullopt;
  return read_conversation(select);
}

Conversation ConversationRepository::load(std::int64_t id) {
  std::optional<Conversation> conversation = find(id);
  if (!conversation) throw NotFound(db_.file(), unit(id), "no such conversation");
  return *conversation;
}

std::vector<Conversation> ConversationRepository::list() {
  Statement select(
      db_,
      std::string("SELECT ") + kColumns + " FROM conversations ORDER BY updated_ms DESC, id DESC",
      "conversation list");
  std::vector<Conversation> conversations;
  while (select.step())
    conversations.push_back(read_conversation(select));
  return conversations;
}

void ConversationRepository::rename(std::int64_t id, const std::string& new_name) {
  if (new_name.empty()) throw StoreError(db_.file(), unit(id), "a conversation needs a name");
  Transaction transaction(db_, unit(id));
  load(id);
  if (std::optional<Conversation> other = find_by_name(new_name); other && other->id != id) {
    throw StoreError(db_.file(), unit(id),
                     "cannot rename to '" + new_name + "': conversation " +
                         std::to_string(other->id) + " has that name");
  }
  Statement update(db_, "UPDATE conversations SET name = ?2, updated_ms = ?3 WHERE id = ?1",
                   unit(id));
  update.bind(1, id).bind(2, new_name).bind(3, unix_now_ms()).run();
  transaction.commit();
}

void ConversationRepository::set_model_fingerprint(std::int64_t id,
                                                   const std::string& model_fingerprint) {
  Statement update(db_, "UPDATE conversations SET model_fingerprint = ?2 WHERE id = ?1", unit(id));
  update.bind(1, id).bind(2, model_fingerprint).run();
  if (db_.changes() == 0) throw NotFound(db_.file(), unit(id), "no such conversation");
}

void ConversationRepository::set_memory_policy(std::int64_t id, const std::string& policy,
                                               std::int64_t kv_budget) {
  if (kv_budget < 0) throw StoreError(db_.file(), unit(id), "a KV budget must not be negative");
  Statement update(db_, "UPDATE conversations SET memory_policy = ?2, kv_budget = ?3 WHERE id = ?1",
                   unit(id));
  update.bind(1, id).bind(2, policy).bind(3, kv_budget).run();
  if (db_.changes() == 0) throw NotFound(db_.file(), unit(id), "no such conversation");
}

void ConversationRepository::truncate(std::int64_t conversation_id, std::int64_t from_index) {
  if (from_index < 0) {
    throw StoreError(db_.file(), unit(conversation_id),
                     "cannot truncate from utterance " + std::to_string(from_index));
  }
  Transaction transaction(db_, unit(conversation_id));
  load(conversation_id);
  // Only a tail goes, so the remaining indexes stay dense and append() continues at from_index.
  Statement del(db_, "DELETE FROM utterances WHERE conversation_id = ?1 AND idx >= ?2",
                unit(conversation_id));
  del.bind(1, conversation_id).bind(2, from_index).run();
  if (db_.changes() > 0) {
    Statement touch(db_, "UPDATE conversations SET updated_ms = max(updated_ms, ?2) WHERE id = ?1",
                    unit(conversation_id));
    touch.bind(1, conversation_id).bind(2, unix_now_ms()).run();
  }
  transaction.commit();
}

void ConversationRepository::remove(std::int64_t id) {
  Transaction transaction(db_, unit(id));
  load(id);
  std::vector<std::filesystem::path> blob_files;
  Statement files(db_, "SELECT file FROM kv_blobs WHERE conversation_id = ?1", unit(id));
  files.bind(1, id);
  while (files.step())
    blob_files.push_back(db_.paths().kv / files.text(0));
  Statement drop(db_, "DELETE FROM conversations WHERE id = ?1", unit(id));
  drop.bind(1, id).run();
  // Files go only once no committed row can reference them; a crash in between leaves orphans
  // for the next open's sweep, never a row without its file.
  db_.on_commit([blob_files] {
    for (const auto& file : blob_files)
      remove_file_quietly(file);
  });
  transaction.commit();
}

Utterance ConversationRepository::append(std::int64_t conversation_id, Utterance utterance) {
  Transaction transaction(db_, unit(conversation_id));
  load(conversation_id);
  utterance.conversation_id = conversation_id;
  utterance.index = utterance_count(conversation_id);
  if (utterance.time_ms == 0) utterance.time_ms = unix_now_ms();
  Statement insert(db_,
                   "INSERT INTO utterances (conversation_id, idx, role, text, time_ms, "
                   "token_begin, token_end) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   unit(conversation_id));
  insert.bind(1, conversation_id)
      .bind(2, utterance.index)
      .bind(3, utterance.role)
      .bind(4, utterance.text)
      .bind(5, utterance.time_ms)
      .bind(6, utterance.token_begin)
      .bind(7, utterance.token_end)
      .run();
  Statement touch(db_, "UPDATE conversations SET updated_ms = max(updated_ms, ?2) WHERE id = ?1",
                  unit(conversation_id));
  touch.bind(1, conversation_id).bind(2, utterance.time_ms).run();
  transaction.commit();
  return utterance;
}

std::vector<Utterance> ConversationRepository::utterances(std::int64_t conversation_id,
                                                          std::int64_t from_index,
                                                          std::int64_t limit) {
  Statement select(db_,
                   "SELECT conversation_id, idx, role, text, time_ms, token_begin, token_end "
                   "FROM utterances WHERE conversation_id = ?1 AND idx >= ?2 ORDER BY idx "
                   "LIMIT ?3",
                   unit(conversation_id));
  select.bind(1, conversation_id).bind(2, from_index).bind(3, limit);
  std::vector<Utterance> result;
  while (select.step()) {
    result.push_back({select.int64(0), select.int64(1), select.text(2), select.text(3),
                      select.int64(4), select.int64(5), select.int64(6)});
  }
  return result;
}

std::int64_t ConversationRepository::utterance_count(std::int64_t conversation_id) {
  // Indexes are dense from 0, so the next one is max + 1; the primary key makes this a seek.
  Statement select(db_, "SELECT ifnull(max(idx) + 1, 0) FROM utterances WHERE conversation_id = ?1",
                   unit(conversation_id));
  select.bind(1, conversation_id);
  select.step();
  return select.int64(0);
}

std::vector<Conversation> ConversationRepository::search(const std::string& text) {
  Statement select(
      db_,
      std::string("SELECT ") + kColumns +
          " FROM conversations c WHERE c.name LIKE ?1 ESCAPE '\\' OR EXISTS (SELECT 1 FROM "
          "utterances u WHERE u.conversation_id = c.id AND u.text LIKE ?1 ESCAPE '\\') "
          "ORDER BY c.updated_ms DESC, c.id DESC",
      "search for '" + text + "'");
  select.bind(1, like_pattern(text));
  std::vector<Conversation> conversations;
  while (select.step())
    conversations.push_back(read_conversation(select));
  return conversations;
}

}  // namespace engram::storage
