// Embedding vectors of units (segments, episodes, utterances...), one per owner and embedding
// model, so that switching the embedding model keeps the old vectors apart instead of mixing
// spaces. Stored as little-endian float32 arrays.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "storage/records.h"

namespace engram::storage {

class Database;

class EmbeddingRepository {
 public:
  explicit EmbeddingRepository(Database& db);

  void put(const Embedding& embedding);  // replaces the owner's vector for that model
  std::optional<Embedding> find(const UnitRef& owner, const std::string& model);
  // Every embedding of the conversation (world memory when empty) for `model`, by owner.
  std::vector<Embedding> list(std::optional<std::int64_t> conversation_id,
                              const std::string& model);
  bool remove(const UnitRef& owner, const std::string& model);

 private:
  Database& db_;
};

}  // namespace engram::storage
