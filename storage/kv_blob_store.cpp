#include "storage/kv_blob_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <stdexcept>

#include "core/log.h"
#include "storage/clock.h"
#include "storage/database.h"
#include "storage/durable_file.h"
#include "storage/sqlite_statement.h"
#include "storage/store_error.h"
#include "storage/xxh64.h"

namespace engram::storage {

namespace {

constexpr const char* kBlobSuffix = ".kv";
constexpr const char* kTempSuffix = ".tmp";
constexpr std::size_t kReadChunk = std::size_t{8} << 20;

constexpr const char* kColumns =
    "id, conversation_id, unit_kind, unit_id, layer_begin, layer_end, dtype, shape, positions, "
    "file, byte_size, checksum, model_fingerprint, created_ms";

// Matches a key through the unique index on ifnull(conversation_id, 0).
constexpr const char* kKeyCondition =
    "ifnull(conversation_id, 0) = ifnull(?1, 0) AND unit_kind = ?2 AND unit_id = ?3 AND "
    "layer_begin = ?4 AND layer_end = ?5";

void bind_key(Statement& statement, const KvBlobKey& key) {
  statement.bind(1, key.unit.conversation_id)
      .bind(2, key.unit.kind)
      .bind(3, key.unit.id)
      .bind(4, key.layer_begin)
      .bind(5, key.layer_end);
}

KvBlobRecord read_record(const Statement& row, const std::string& file) {
  KvBlobRecord record;
  record.id = row.int64(0);
  record.key.unit = {row.optional_int64(1), row.text(2), row.int64(3)};
  record.key.layer_begin = static_cast<std::int32_t>(row.int64(4));
  record.key.layer_end = static_cast<std::int32_t>(row.int64(5));
  record.layout.dtype = row.text(6);
  try {
    record.layout.shape = nlohmann::json::parse(row.text(7)).get<std::vector<std::int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    throw DatabaseCorrupt(file, describe(record.key),
                          std::string("blob shape is not a JSON array of integers: ") + e.what());
  }
  record.layout.positions = row.int64s(8);
  record.file_name = row.text(9);
  record.byte_size = row.int64(10);
  record.checksum = static_cast<std::uint64_t>(row.int64(11));
  record.model_fingerprint = row.text(12);
  record.created_ms = row.int64(13);
  return record;
}

// Unit kinds come from the engine; only a safe subset of characters goes into file names, and
// a random suffix keeps names unique (a replacement never reuses the name of the file it
// replaces, so the old file can be unlinked after commit).
std::string make_file_name(const KvBlobKey& key) {
  std::string kind;
  for (char c : key.unit.kind.substr(0, 24)) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    kind += safe ? c : '_';
  }
  thread_local std::mt19937_64 random(std::random_device{}() ^
                                      (static_cast<std::uint64_t>(getpid()) << 32));
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(random()));
  const std::string owner =
      key.unit.conversation_id ? "c" + std::to_string(*key.unit.conversation_id) : "w";
  return owner + "-" + kind + "-" + std::to_string(key.unit.id) + "-l" +
         std::to_string(key.layer_begin) + "-" + std::to_string(key.layer_end) + "-" + suffix +
         kBlobSuffix;
}

void validate(const KvBlobKey& key, const KvLayout& layout, std::size_t bytes,
              const std::string& fingerprint) {
  const std::string unit = describe(key);
  if (key.unit.kind.empty()) throw std::invalid_argument(unit + ": the unit kind is empty");
  if (key.layer_begin < 0 || key.layer_begin >= key.layer_end) {
    throw std::invalid_argument(unit + ": the layer range is empty or negative");
  }
  if (fingerprint.empty()) throw std::invalid_argument(unit + ": no model fingerprint");
  const std::size_t element = KvBlobStore::dtype_size(layout.dtype);
  if (element == 0) {
    throw std::invalid_argument(unit + ": unknown dtype '" + layout.dtype +
                                "' (known: bf16, fp16, fp32, int8, uint8, fp8_e4m3, fp8_e5m2)");
  }
  std::size_t elements = 1;
  for (std::int64_t dim : layout.shape) {
    if (dim < 0) throw std::invalid_argument(unit + ": negative dimension in the shape");
    elements *= static_cast<std::size_t>(dim);
  }
  if (elements * element != bytes) {
    throw std::invalid_argument(unit + ": shape and dtype " + layout.dtype + " make " +
                                std::to_string(elements * element) + " bytes, the data has " +
                                std::to_string(bytes));
  }
}

}  // namespace

KvBlobStore::KvBlobStore(Database& db) : db_(db) {}

std::size_t KvBlobStore::dtype_size(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "fp16") return 2;
  if (dtype == "fp32") return 4;
  if (dtype == "int8" || dtype == "uint8" || dtype == "fp8_e4m3" || dtype == "fp8_e5m2") return 1;
  return 0;
}

std::filesystem::path KvBlobStore::path_of(const KvBlobRecord& record) const {
  return db_.paths().kv / record.file_name;
}

KvBlobRecord KvBlobStore::put(const KvBlobKey& key, const KvLayout& layout,
                              std::span<const std::byte> data,
                              const std::string& model_fingerprint) {
  validate(key, layout, data.size(), model_fingerprint);
  const std::string unit = describe(key);
  if (db_.read_only()) throw StoreError(db_.file(), unit, "cannot store a blob: read-only");
  if (key.unit.conversation_id) {
    Statement exists(db_, "SELECT 1 FROM conversations WHERE id = ?1", unit);
    exists.bind(1, *key.unit.conversation_id);
    if (!exists.step()) throw NotFound(db_.file(), unit, "no such conversation");
  }

  KvBlobRecord record;
  record.key = key;
  record.layout = layout;
  record.file_name = make_file_name(key);
  record.byte_size = static_cast<std::int64_t>(data.size());
  record.model_fingerprint = model_fingerprint;
  record.created_ms = unix_now_ms();
  const std::filesystem::path final_path = db_.paths().kv / record.file_name;
  std::filesystem::path temp_path = final_path;
  temp_path += kTempSuffix;

  // Step 1: the file, complete and durable under its final name, but referenced by no row.
  record.checksum = write_file_durably(temp_path, final_path, data, unit);

  // Step 2: the row. Until the commit the file is an orphan; if the transaction fails or is
  // rolled back the file goes with it, and if the process dies the next open sweeps it.
  bool file_owned_by_transaction = false;
  try {
    Transaction transaction(db_, unit);
    db_.on_rollback([final_path] { remove_file_quietly(final_path); });
    file_owned_by_transaction = true;

    Statement old(db_, std::string("SELECT file FROM kv_blobs WHERE ") + kKeyCondition, unit);
    bind_key(old, key);
    if (old.step()) {
      const std::filesystem::path old_path = db_.paths().kv / old.text(0);
      Statement drop(db_, std::string("DELETE FROM kv_blobs WHERE ") + kKeyCondition, unit);
      bind_key(drop, key);
      drop.run();
      db_.on_commit([old_path] { remove_file_quietly(old_path); });
    }

    Statement insert(db_,
                     "INSERT INTO kv_blobs (conversation_id, unit_kind, unit_id, layer_begin, "
                     "layer_end, dtype, shape, positions, file, byte_size, checksum, "
                     "model_fingerprint, created_ms) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                     unit);
    bind_key(insert, key);
    insert.bind(6, layout.dtype)
        .bind(7, nlohmann::json(layout.shape).dump())
        .bind_int64s(8, layout.positions)
        .bind(9, record.file_name)
        .bind(10, record.byte_size)
        .bind(11, static_cast<std::int64_t>(record.checksum))
        .bind(12, model_fingerprint)
        .bind(13, record.created_ms);
    insert.run();
    record.id = db_.last_insert_id();
    transaction.commit();
  } catch (...) {
    if (!file_owned_by_transaction) remove_file_quietly(final_path);
    throw;
  }
  return record;
}

std::optional<KvBlobRecord> KvBlobStore::find(const KvBlobKey& key) {
  const std::string unit = describe(key);
  Statement select(db_, std::string("SELECT ") + kColumns + " FROM kv_blobs WHERE " + kKeyCondition,
                   unit);
  bind_key(select, key);
  if (!select.step()) return std::nullopt;
  return read_record(select, db_.file());
}

std::vector<KvBlobRecord> KvBlobStore::list(std::optional<std::int64_t> conversation_id) {
  Statement select(db_,
                   std::string("SELECT ") + kColumns +
                       " FROM kv_blobs WHERE ifnull(conversation_id, 0) = ifnull(?1, 0) "
                       "ORDER BY unit_kind, unit_id, layer_begin",
                   conversation_id ? "conversation " + std::to_string(*conversation_id)
                                   : std::string("world memory"));
  select.bind(1, conversation_id);
  std::vector<KvBlobRecord> records;
  while (select.step())
    records.push_back(read_record(select, db_.file()));
  return records;
}

std::vector<KvBlobRecord> KvBlobStore::list_all() {
  Statement select(db_, std::string("SELECT ") + kColumns + " FROM kv_blobs ORDER BY id",
                   "KV blob index");
  std::vector<KvBlobRecord> records;
  while (select.step())
    records.push_back(read_record(select, db_.file()));
  return records;
}

namespace {

// Reads the whole file into `destination` (its size is the expected size), checking size and
// checksum; every failure names the file and the unit.
void read_verified(const std::filesystem::path& path, const KvBlobRecord& record,
                   std::span<std::byte> destination) {
  const std::string unit = describe(record.key);
  const std::string file = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      throw BlobCorrupt(file, unit, "the blob file is missing (the index row references it)");
    }
    throw StoreError(file, unit, std::string("cannot open the blob file: ") + std::strerror(error));
  }
  struct stat info {};
  if (fstat(fd, &info) != 0 || info.st_size != record.byte_size) {
    const long long size = info.st_size;
    ::close(fd);
    throw BlobCorrupt(file, unit,
                      "the blob file has " + std::to_string(size) + " bytes, the index says " +
                          std::to_string(record.byte_size) +
                          (size < record.byte_size ? " (truncated)" : ""));
  }
  Xxh64 checksum;
  std::size_t done = 0;
  while (done < destination.size()) {
    const std::size_t chunk = std::min(kReadChunk, destination.size() - done);
    const ssize_t n = ::pread(fd, destination.data() + done, chunk, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : 0;
      ::close(fd);
      throw BlobCorrupt(file, unit,
                        "reading byte " + std::to_string(done) + " failed: " +
                            (error ? std::strerror(error) : "unexpected end of file"));
    }
    checksum.update(destination.subspan(done, static_cast<std::size_t>(n)));
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  const std::uint64_t actual = checksum.digest();
  if (actual != record.checksum) {
    char text[96];
    std::snprintf(text, sizeof text, "checksum mismatch: XXH64 %016llx, the index says %016llx",
                  static_cast<unsigned long long>(actual),
                  static_cast<unsigned long long>(record.checksum));
    throw BlobCorrupt(file, unit, text);
  }
}

}  // namespace

KvBlobRecord KvBlobStore::get(const KvBlobKey& key, const std::string& model_fingerprint,
                              std::span<std::byte> destination) {
  const std::string unit = describe(key);
  std::optional<KvBlobRecord> record = find(key);
  if (!record) throw NotFound(db_.file(), unit, "no KV blob stored");
  const std::string file = path_of(*record).string();
  if (record->model_fingerprint != model_fingerprint) {
    throw BlobStale(file, unit,
                    "made with model '" + record->model_fingerprint + "', not '" +
                        model_fingerprint + "'; rebuild it from text");
  }
  if (destination.size() != static_cast<std::size_t>(record->byte_size)) {
    throw std::invalid_argument(file + ": " + unit + ": destination holds " +
                                std::to_string(destination.size()) + " bytes, the blob has " +
                                std::to_string(record->byte_size));
  }
  read_verified(path_of(*record), *record, destination);
  return *record;
}

KvBlobStore::Blob KvBlobStore::get(const KvBlobKey& key, const std::string& model_fingerprint) {
  std::optional<KvBlobRecord> record = find(key);
  if (!record) throw NotFound(db_.file(), describe(key), "no KV blob stored");
  Blob blob;
  blob.data.resize(static_cast<std::size_t>(record->byte_size));
  blob.record = get(key, model_fingerprint, blob.data);
  return blob;
}

void KvBlobStore::verify(const KvBlobRecord& record) {
  std::vector<std::byte> data(static_cast<std::size_t>(record.byte_size));
  read_verified(path_of(record), record, data);
}

std::size_t KvBlobStore::remove_where(const std::string& condition, const std::string& unit,
                                      const std::function<void(Statement&)>& bind) {
  Transaction transaction(db_, unit);
  Statement files(db_, "SELECT file FROM kv_blobs WHERE " + condition, unit);
  bind(files);
  std::vector<std::filesystem::path> paths;
  while (files.step())
    paths.push_back(db_.paths().kv / files.text(0));
  Statement drop(db_, "DELETE FROM kv_blobs WHERE " + condition, unit);
  bind(drop);
  drop.run();
  // Unlinking before the commit could leave rows pointing at nothing if the commit failed.
  db_.on_commit([paths] {
    for (const auto& path : paths)
      remove_file_quietly(path);
  });
  transaction.commit();
  return paths.size();
}

bool KvBlobStore::remove(const KvBlobKey& key) {
  return remove_where(kKeyCondition, describe(key),
                      [&](Statement& statement) { bind_key(statement, key); }) > 0;
}

std::size_t KvBlobStore::remove_unit(const UnitRef& unit) {
  return remove_where(
      "ifnull(conversation_id, 0) = ifnull(?1, 0) AND unit_kind = ?2 AND "
      "unit_id = ?3",
      describe(unit), [&](Statement& statement) {
        statement.bind(1, unit.conversation_id).bind(2, unit.kind).bind(3, unit.id);
      });
}

std::size_t KvBlobStore::remove_stale(const std::string& current_fingerprint) {
  return remove_where("model_fingerprint != ?1", "blobs of other models",
                      [&](Statement& statement) { statement.bind(1, current_fingerprint); });
}

std::size_t KvBlobStore::sweep_unreferenced(Database& db) {
  std::set<std::string> referenced;
  Statement files(db, "SELECT file FROM kv_blobs", "KV blob sweep");
  while (files.step())
    referenced.insert(files.text(0));

  std::size_t removed = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(db.paths().kv, error)) {
    const std::filesystem::path& path = entry.path();
    const std::string name = path.filename().string();
    const bool temporary = path.extension() == kTempSuffix;
    const bool orphan = path.extension() == kBlobSuffix && !referenced.contains(name);
    // Files we did not name (a person's notes, say) are left alone.
    if (!temporary && !orphan) continue;
    if (::unlink(path.c_str()) == 0) {
      ++removed;
    } else {
      log::warn("storage: cannot remove " + path.string() + ": " + std::strerror(errno));
    }
  }
  if (error) {
    throw StoreError(db.paths().kv.string(), "KV blob sweep",
                     "cannot list the blob directory: " + error.message());
  }
  // The removals need not be durable: a file that reappears after a power loss is swept again.
  return removed;
}

}  // namespace engram::storage
