#include "storage/embedding_repository.h"

#include "storage/database.h"
#include "storage/sqlite_statement.h"

namespace engram::storage {

namespace {

constexpr const char* kOwnerCondition =
    "ifnull(conversation_id, 0) = ifnull(?1, 0) AND owner_kind = ?2 AND owner_id = ?3 AND "
    "model = ?4";

}  // namespace

EmbeddingRepository::EmbeddingRepository(Database& db) : db_(db) {}

void EmbeddingRepository::put(const Embedding& embedding) {
  const std::string unit = describe(embedding.owner) + " embedding '" + embedding.model + "'";
  Transaction transaction(db_, unit);
  remove(embedding.owner, embedding.model);
  Statement insert(db_,
                   "INSERT INTO embeddings (conversation_id, owner_kind, owner_id, model, vector) "
                   "VALUES (?1, ?2, ?3, ?4, ?5)",
                   unit);
  insert.bind(1, embedding.owner.conversation_id)
      .bind(2, embedding.owner.kind)
      .bind(3, embedding.owner.id)
      .bind(4, embedding.model)
      .bind_floats(5, embedding.vector)
      .run();
  transaction.commit();
}

std::optional<Embedding> EmbeddingRepository::find(const UnitRef& owner, const std::string& model) {
  Statement select(db_, std::string("SELECT vector FROM embeddings WHERE ") + kOwnerCondition,
                   describe(owner) + " embedding '" + model + "'");
  select.bind(1, owner.conversation_id).bind(2, owner.kind).bind(3, owner.id).bind(4, model);
  if (!select.step()) return std::nullopt;
  return Embedding{owner, model, select.floats(0)};
}

std::vector<Embedding> EmbeddingRepository::list(std::optional<std::int64_t> conversation_id,
                                                 const std::string& model) {
  Statement select(db_,
                   "SELECT owner_kind, owner_id, vector FROM embeddings WHERE "
                   "ifnull(conversation_id, 0) = ifnull(?1, 0) AND model = ?2 "
                   "ORDER BY owner_kind, owner_id",
                   "embeddings '" + model + "'");
  select.bind(1, conversation_id).bind(2, model);
  std::vector<Embedding> result;
  while (select.step()) {
    result.push_back({{conversation_id, select.text(0), select.int64(1)}, model, select.floats(2)});
  }
  return result;
}

bool EmbeddingRepository::remove(const UnitRef& owner, const std::string& model) {
  Statement drop(db_, std::string("DELETE FROM embeddings WHERE ") + kOwnerCondition,
                 describe(owner) + " embedding '" + model + "'");
  drop.bind(1, owner.conversation_id).bind(2, owner.kind).bind(3, owner.id).bind(4, model).run();
  return db_.changes() > 0;
}

}  // namespace engram::storage
