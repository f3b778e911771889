#include "storage/database.h"

#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/log.h"
#include "storage/kv_blob_store.h"
#include "storage/profile_lock.h"
#include "storage/schema.h"
#include "storage/sqlite_statement.h"
#include "storage/store_error.h"

namespace engram::storage {

namespace {

// How long a connection waits for a lock held by another connection before failing with
// SQLITE_BUSY. In WAL mode readers never wait for the writer; the waits left are a checkpoint
// or WAL recovery by another connection, which take milliseconds. Five seconds absorbs a slow
// disk without letting a real deadlock hang the UI forever.
constexpr int kBusyTimeoutMs = 5000;

// Why writes under `dir` may fail for lack of space, or an empty string: a finite file size
// limit on this process, or less than kLowSpaceBytes free on the filesystem.
std::string out_of_space_reason(const std::filesystem::path& dir) {
  constexpr unsigned long long kLowSpaceBytes = 16ULL << 20;
  rlimit limit{};
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    return "the process file size limit (RLIMIT_FSIZE) is " + std::to_string(limit.rlim_cur) +
           " bytes";
  }
  struct statvfs fs {};
  if (statvfs(dir.c_str(), &fs) == 0) {
    const unsigned long long free_bytes =
        static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize;
    if (free_bytes < kLowSpaceBytes) {
      return "the disk is full (" + std::to_string(free_bytes) + " bytes free)";
    }
  }
  return {};
}

std::int64_t pragma_int(Database& db, const std::string& pragma) {
  Statement statement(db, "PRAGMA " + pragma);
  return statement.step() ? statement.int64(0) : 0;
}

}  // namespace

Database::Database(const std::filesystem::path& profile_dir, Access access)
    : paths_(profile_paths(profile_dir)), access_(access) {
  const std::string file = paths_.database.string();
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (access_ == Access::kReadWrite) {
    std::error_code error;
    std::filesystem::create_directories(paths_.kv, error);
    if (error) {
      throw StoreError(paths_.kv.string(), {},
                       "cannot create the profile directory: " + error.message());
    }
    lock_ = std::make_unique<ProfileLock>(paths_.lock);
  } else {
    if (!std::filesystem::exists(paths_.database)) {
      throw NotFound(file, {}, "no database to open read-only");
    }
    flags = SQLITE_OPEN_READONLY;
  }

  const int rc = sqlite3_open_v2(file.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    close();
    throw StoreError(file, {}, "cannot open the database: " + message);
  }
  // Extended codes let fail() tell a full disk (SQLITE_IOERR_WRITE with EFBIG) from other I/O.
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);

  try {
    // The version is read before anything could write to the file, so a database from a newer
    // Engram is refused byte-for-byte untouched (setting journal_mode=WAL would rewrite its
    // header). Reading it is also the first access to the file: a file that is not a database
    // fails here with SQLITE_NOTADB.
    const int version = schema_version();
    if (version > current_schema_version()) {
      throw SchemaTooNew(file, {},
                         "written by a newer Engram (schema version " + std::to_string(version) +
                             ", this build knows up to " +
                             std::to_string(current_schema_version()) +
                             "); refusing to open it so it stays usable by that version");
    }
    if (access_ == Access::kReadWrite) {
      // WAL: the UI thread reads committed rows while the engine writes, and a commit appends
      // to the log instead of rewriting pages in place, so a crash cannot tear a page.
      Statement journal(*this, "PRAGMA journal_mode = WAL");
      if (!journal.step() || journal.text(0) != "wal") {
        throw StoreError(file, {}, "the database refused WAL journal mode");
      }
      // FULL: every commit fsyncs the WAL before COMMIT returns. NORMAL would already survive a
      // killed process (the kill test), but can lose the last commits on power loss; a turn the
      // person saw saved must stay saved. The cost is one fsync per transaction, small beside
      // the fsyncs that blob files need anyway, and the engine commits per turn, not per token.
      exec("PRAGMA synchronous = FULL");
    } else {
      // A reader must never write, even through a bug: query_only refuses writes outright.
      exec("PRAGMA query_only = ON");
    }
    // Foreign keys are off by default in SQLite and per connection; the cascades from a
    // conversation to its utterances, memory, episodes and blob rows depend on them.
    exec("PRAGMA foreign_keys = ON");

    if (access_ == Access::kReadWrite) {
      migrate(*this);
      // Under the lock no one else writes kv/, so files no row references are the leftovers of
      // a crash between a blob's rename and its commit (or of a delete before its unlink).
      swept_files_ = KvBlobStore::sweep_unreferenced(*this);
      if (swept_files_ > 0) {
        log::info("storage: removed " + std::to_string(swept_files_) +
                  " unreferenced blob files from " + paths_.kv.string());
      }
    } else if (version < current_schema_version()) {
      throw StoreError(file, {},
                       "schema version " + std::to_string(version) +
                           " is older than this build's; open it read-write once to migrate");
    }
  } catch (...) {
    close();
    throw;
  }
}

Database::~Database() {
  close();
}

void Database::close() noexcept {
  if (db_ != nullptr) {
    // The last connection to close checkpoints the WAL into the database file and removes it.
    sqlite3_close_v2(db_);
    db_ = nullptr;
  }
  lock_.reset();
}

int Database::schema_version() const {
  return static_cast<int>(pragma_int(const_cast<Database&>(*this), "user_version"));
}

std::int64_t Database::last_insert_id() const {
  return sqlite3_last_insert_rowid(db_);
}

std::int64_t Database::changes() const {
  return sqlite3_changes64(db_);
}

void Database::exec(const std::string& sql, const std::string& unit) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
  sqlite3_free(message);  // fail() reads the same text from sqlite3_errmsg
  if (rc != SQLITE_OK) fail(rc, unit, "running '" + sql.substr(0, 60) + "'");
}

std::vector<std::string> Database::integrity_problems() {
  std::vector<std::string> problems;
  try {
    Statement check(*this, "PRAGMA integrity_check", "integrity check");
    while (check.step()) {
      std::string line = check.text(0);
      if (line != "ok") problems.push_back(std::move(line));
    }
  } catch (const DatabaseCorrupt& e) {
    // Damage bad enough to stop the check itself is one more problem to report, not a throw.
    problems.push_back(e.what());
  }
  return problems;
}

void Database::on_commit(std::function<void()> action) {
  if (depth_ == 0) throw std::logic_error("Database::on_commit needs an open Transaction");
  commit_actions_.push_back(std::move(action));
}

void Database::on_rollback(std::function<void()> action) {
  if (depth_ == 0) throw std::logic_error("Database::on_rollback needs an open Transaction");
  rollback_actions_.push_back(std::move(action));
}

void Database::fail(int rc, const std::string& unit, const std::string& action) const {
  const std::string message = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  const int system_errno = db_ ? sqlite3_system_errno(db_) : 0;
  const std::string detail =
      action + " failed: " + message + " (SQLite code " + std::to_string(rc) + ")";
  const std::string file = this->file();
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      throw DatabaseCorrupt(file, unit,
                            detail +
                                "; the database file is damaged (restore it from a backup, "
                                "or move it away to start a new profile)");
    case SQLITE_FULL:
      throw StorageFull(file, unit, detail + "; the disk is full, nothing was saved");
    case SQLITE_IOERR:
      // SQLite reports ENOSPC as SQLITE_FULL but EFBIG (past RLIMIT_FSIZE) or EDQUOT as a plain
      // write error, and its saved errno may already be overwritten by the rollback that
      // followed; so for write errors we look at the limit and the free space ourselves.
      if (system_errno == ENOSPC || system_errno == EFBIG || system_errno == EDQUOT) {
        throw StorageFull(file, unit,
                          detail + ": " + std::strerror(system_errno) + "; nothing was saved");
      }
      if (rc == SQLITE_IOERR_WRITE || rc == SQLITE_IOERR_FSYNC || rc == SQLITE_IOERR_TRUNCATE) {
        if (const std::string reason = out_of_space_reason(paths_.dir); !reason.empty()) {
          throw StorageFull(file, unit, detail + "; " + reason + "; nothing was saved");
        }
      }
      throw StoreError(file, unit,
                       detail + (system_errno ? std::string(": ") + std::strerror(system_errno)
                                              : std::string()));
    case SQLITE_READONLY:
      throw StoreError(file, unit, detail + "; this connection is read-only");
    default:
      throw StoreError(file, unit, detail);
  }
}

Transaction::Transaction(Database& db, std::string unit) : db_(db), unit_(std::move(unit)) {
  if (db_.depth_ == 0) {
    db_.exec("BEGIN IMMEDIATE", unit_);
  } else {
    savepoint_ = "nested_" + std::to_string(db_.depth_);
    commit_mark_ = db_.commit_actions_.size();
    rollback_mark_ = db_.rollback_actions_.size();
    db_.exec("SAVEPOINT " + savepoint_, unit_);
  }
  ++db_.depth_;
}

Transaction::~Transaction() {
  if (!done_) finish(false);
}

void Transaction::commit() {
  if (done_) throw std::logic_error("Transaction committed twice");
  if (savepoint_.empty()) {
    db_.exec("COMMIT", unit_);  // on failure the destructor rolls back
  } else {
    db_.exec("RELEASE " + savepoint_, unit_);
  }
  finish(true);
}

void Transaction::finish(bool committed) noexcept {
  done_ = true;
  --db_.depth_;
  auto run = [](std::vector<std::function<void()>>& actions) {
    for (auto& action : actions)
      action();
    actions.clear();
  };
  if (!savepoint_.empty()) {
    if (!committed) {
      if (!sqlite3_get_autocommit(db_.db_)) {
        const std::string sql = "ROLLBACK TO " + savepoint_ + "; RELEASE " + savepoint_;
        sqlite3_exec(db_.db_, sql.c_str(), nullptr, nullptr, nullptr);
      }
      // What this savepoint queued is undone now, whatever the outer transaction does later.
      for (std::size_t i = rollback_mark_; i < db_.rollback_actions_.size(); ++i) {
        db_.rollback_actions_[i]();
      }
      db_.rollback_actions_.resize(rollback_mark_);
      db_.commit_actions_.resize(commit_mark_);
    }
    return;
  }
  if (committed) {
    run(db_.commit_actions_);
    db_.rollback_actions_.clear();
  } else {
    // SQLite may already have rolled back on its own (after SQLITE_FULL or an I/O error).
    if (!sqlite3_get_autocommit(db_.db_)) {
      sqlite3_exec(db_.db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    run(db_.rollback_actions_);
    db_.commit_actions_.clear();
  }
}

}  // namespace engram::storage
