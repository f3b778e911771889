// Conversations and their utterances. Deleting a conversation deletes everything it owns
// (utterances, memory, episodes, embeddings, KV blob rows) in one transaction through the
// schema's cascades, and unlinks its blob files only after that transaction commits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "storage/records.h"

namespace engram::storage {

class Database;

class ConversationRepository {
 public:
  explicit ConversationRepository(Database& db);

  // Throws StoreError when the name is taken or empty.
  Conversation create(const std::string& name, const std::string& model_fingerprint = {});
  // Stores a conversation made elsewhere (an import): name, times, fingerprint, memory policy and
  // KV budget as given, a new id. Throws StoreError when the name is taken or empty, or the
  // budget negative.
  Conversation insert(const Conversation& conversation);
  std::optional<Conversation> find(std::int64_t id);
  std::optional<Conversation> find_by_name(const std::string& name);
  Conversation load(std::int64_t id);  // throws NotFound
  std::vector<Conversation> list();    // most recently updated first
  void rename(std::int64_t id, const std::string& new_name);
  void set_model_fingerprint(std::int64_t id, const std::string& model_fingerprint);
  // The conversation's memory policy spec and KV budget (throws NotFound; a negative budget is a
  // StoreError).
  void set_memory_policy(std::int64_t id, const std::string& policy, std::int64_t kv_budget);
  void remove(std::int64_t id);  // throws NotFound
  // Deletes utterances [from_index, end): a replaced tail (regenerate, a failed turn). The next
  // append() gets index from_index (or the old count when that was smaller). Touches updated_ms
  // when it deleted anything. Throws NotFound for a missing conversation, StoreError for a
  // negative from_index.
  void truncate(std::int64_t conversation_id, std::int64_t from_index);

  // Stores `utterance` at the next index of the conversation (its conversation_id and index are
  // assigned; time_ms 0 means now) and touches the conversation's updated_ms.
  Utterance append(std::int64_t conversation_id, Utterance utterance);
  // Utterances [from_index, from_index + limit), all to the end when limit is negative.
  std::vector<Utterance> utterances(std::int64_t conversation_id, std::int64_t from_index = 0,
                                    std::int64_t limit = -1);
  std::int64_t utterance_count(std::int64_t conversation_id);

  // Conversations whose name or any utterance contains `text` (ASCII case-insensitive, as
  // SQLite's LIKE), most recently updated first.
  std::vector<Conversation> search(const std::string& text);

 private:
  std::string unit(std::int64_t id) const;

  Database& db_;
};

}  // namespace engram::storage
