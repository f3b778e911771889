// KV tensors as side files in <profile>/kv/, indexed by the kv_blobs table.
//
// put: the bytes go to a temporary file, are fsynced, renamed to their final name and the
// directory is fsynced; only then does one transaction insert the index row (and drop the row of
// the blob it replaces). A kill at any moment therefore leaves either no row, possibly with an
// orphan file that the next read-write open sweeps, or a row whose file is complete. A row is
// never written before its file, and a replaced file is unlinked only after the commit.
//
// get: checks the model fingerprint first (another model's caches are never used: BlobStale),
// then the file's size and XXH64 against the row (BlobCorrupt), reading straight into the
// caller's buffer, which may be pinned CPU memory for a later host-to-device copy.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "storage/records.h"

namespace engram::storage {

class Database;
class Statement;

class KvBlobStore {
 public:
  explicit KvBlobStore(Database& db);

  // Stores the blob of `key`, replacing an older one. Throws std::invalid_argument when the
  // layout does not account for the bytes (unknown dtype, shape * dtype size != bytes),
  // StorageFull when the disk or the file size limit is reached (nothing becomes visible, the
  // temporary file is removed), NotFound when the key's conversation does not exist.
  KvBlobRecord put(const KvBlobKey& key, const KvLayout& layout, std::span<const std::byte> data,
                   const std::string& model_fingerprint);

  std::optional<KvBlobRecord> find(const KvBlobKey& key);
  // The blobs of a conversation, or of world memory when `conversation_id` is empty.
  std::vector<KvBlobRecord> list(std::optional<std::int64_t> conversation_id);
  std::vector<KvBlobRecord> list_all();

  // Reads the blob into `destination`, whose size must equal the record's byte_size (find()
  // tells it). Throws NotFound, BlobStale (fingerprint differs; nothing is read), BlobCorrupt
  // (missing file, wrong size, checksum mismatch; `destination` then holds garbage).
  KvBlobRecord get(const KvBlobKey& key, const std::string& model_fingerprint,
                   std::span<std::byte> destination);
  struct Blob {
    KvBlobRecord record;
    std::vector<std::byte> data;
  };
  Blob get(const KvBlobKey& key, const std::string& model_fingerprint);

  // Checks a record's file (size and checksum) without a caller buffer; throws BlobCorrupt.
  void verify(const KvBlobRecord& record);

  // Removals delete rows in a transaction and unlink files after it commits.
  bool remove(const KvBlobKey& key);
  std::size_t remove_unit(const UnitRef& unit);  // every layer range of the unit
  // Drops every blob made with another model, so the engine rebuilds them; returns how many.
  std::size_t remove_stale(const std::string& current_fingerprint);

  std::filesystem::path path_of(const KvBlobRecord& record) const;

  // Removes files in kv/ that no row references and leftover temporary files. Only safe while
  // no put is in flight: Database's read-write open calls it under the profile lock.
  static std::size_t sweep_unreferenced(Database& db);

  // Bytes per element of a dtype name, 0 when unknown.
  static std::size_t dtype_size(const std::string& dtype);

 private:
  std::size_t remove_where(const std::string& condition, const std::string& unit,
                           const std::function<void(Statement&)>& bind);

  Database& db_;
};

}  // namespace engram::storage
