// The errors of the store. Each names the file (the database or a blob) and the unit (a
// conversation, a KV blob's owner and layer range) so that the person knows what is damaged and
// the engine knows what it may still use (STYLE rule 7). Subclasses are the cases a caller reacts
// to differently; everything else is a plain StoreError.
#pragma once

#include <stdexcept>
#include <string>

namespace engram::storage {

class StoreError : public std::runtime_error {
 public:
  StoreError(std::string file, std::string unit, std::string problem);
  const std::string& file() const { return file_; }
  const std::string& unit() const { return unit_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string file_;
  std::string unit_;
  std::string problem_;
};

// The database file is not a SQLite database or has damaged pages. Rows in undamaged pages
// (other conversations) stay usable.
class DatabaseCorrupt : public StoreError {
 public:
  using StoreError::StoreError;
};

// The database was written by a newer Engram (its user_version is above ours). Refused before
// anything is written to it.
class SchemaTooNew : public StoreError {
 public:
  using StoreError::StoreError;
};

// Another process holds the profile's lock.
class ProfileInUse : public StoreError {
 public:
  ProfileInUse(std::string file, long holder_pid, std::string problem)
      : StoreError(std::move(file), {}, std::move(problem)), holder_pid_(holder_pid) {}
  // 0 when the holder had not yet written its pid.
  long holder_pid() const { return holder_pid_; }

 private:
  long holder_pid_;
};

// No space left or the file size limit reached; the write was rolled back and nothing of it is
// visible.
class StorageFull : public StoreError {
 public:
  using StoreError::StoreError;
};

// The named row (conversation, segment, blob record) does not exist.
class NotFound : public StoreError {
 public:
  using StoreError::StoreError;
};

// A KV blob file is missing, has the wrong size, or fails its checksum.
class BlobCorrupt : public StoreError {
 public:
  using StoreError::StoreError;
};

// A KV blob made with other model weights or RoPE settings (another model fingerprint): the
// engine must rebuild it from text, never use it.
class BlobStale : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace engram::storage
