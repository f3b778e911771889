// The schema as a list of forward migrations. PRAGMA user_version holds the number of steps
// applied; step N takes a database from version N-1 to N inside one transaction, so a crash
// during a migration leaves the previous version intact. Steps are never edited once released:
// a change is a new step at the end.
#pragma once

#include <span>

namespace engram::storage {

class Database;

struct Migration {
  int version;          // user_version after this step
  const char* purpose;  // why the step exists, for the log and docs/storage.md
  const char* sql;
};

std::span<const Migration> schema_migrations();
int current_schema_version();

// Applies the missing steps up to current_schema_version(). The caller has already refused
// newer databases.
void migrate(Database& db);

}  // namespace engram::storage
