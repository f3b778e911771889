// One SQLite connection to a profile (profile_paths.h). The read-write connection is the
// engine's: it takes the profile lock, sets the pragmas, migrates the schema forward and sweeps
// blob files that no row references. Read-only connections are for other threads of the same
// process (the UI) or other processes that only look: WAL lets them read the last committed
// state while the writer is inside a transaction, without taking the lock.
//
// A connection is used by one thread at a time; open one per thread. Errors are thrown as the
// StoreError subclass that matches (store_error.h), naming the database file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "storage/profile_paths.h"

struct sqlite3;

namespace engram::storage {

class ProfileLock;

enum class Access { kReadWrite, kReadOnly };

class Database {
 public:
  // kReadWrite creates the profile directory and database when absent. kReadOnly needs an
  // existing database; it neither migrates nor sweeps. Both refuse a newer schema (SchemaTooNew,
  // file untouched) and a damaged file (DatabaseCorrupt).
  explicit Database(const std::filesystem::path& profile_dir, Access access = Access::kReadWrite);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  const ProfilePaths& paths() const { return paths_; }
  std::string file() const { return paths_.database.string(); }
  bool read_only() const { return access_ == Access::kReadOnly; }
  int schema_version() const;
  // Blob and temporary files removed by the sweep at open (0 for read-only connections).
  std::size_t swept_files() const { return swept_files_; }

  // Runs SQL that returns no rows (several statements allowed).
  void exec(const std::string& sql, const std::string& unit = {});
  // PRAGMA integrity_check: empty when the file is sound, else SQLite's list of problems.
  std::vector<std::string> integrity_problems();

  // Actions for after the outermost Transaction commits (remove blob files of deleted rows) or
  // rolls back (remove blob files that never became visible). Need an open Transaction. Actions
  // must not throw.
  void on_commit(std::function<void()> action);
  void on_rollback(std::function<void()> action);
  bool in_transaction() const { return depth_ > 0; }

  // The rowid of the last INSERT on this connection.
  std::int64_t last_insert_id() const;
  // Rows changed by the last INSERT, UPDATE or DELETE on this connection.
  std::int64_t changes() const;

  sqlite3* handle() const { return db_; }
  // Throws the StoreError subclass for SQLite result `rc` of `action` on `unit`.
  [[noreturn]] void fail(int rc, const std::string& unit, const std::string& action) const;

 private:
  friend class Transaction;
  void close() noexcept;

  ProfilePaths paths_;
  Access access_;
  std::unique_ptr<ProfileLock> lock_;
  sqlite3* db_ = nullptr;
  int depth_ = 0;
  std::size_t swept_files_ = 0;
  std::vector<std::function<void()>> commit_actions_;
  std::vector<std::function<void()>> rollback_actions_;
};

// A write transaction. The outermost one is BEGIN IMMEDIATE (it takes the write lock at once,
// so it cannot fail half-way with SQLITE_BUSY on lock upgrade); nested ones are savepoints, so
// repository calls compose inside a caller's transaction. Rolls back unless commit() was called.
class Transaction {
 public:
  explicit Transaction(Database& db, std::string unit = {});
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  void finish(bool committed) noexcept;

  Database& db_;
  std::string unit_;
  std::string savepoint_;        // empty for the outermost transaction
  std::size_t commit_mark_ = 0;  // actions queued before this savepoint
  std::size_t rollback_mark_ = 0;
  bool done_ = false;
};

}  // namespace engram::storage
