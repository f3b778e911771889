// Files that are either complete or absent after a crash, the building block of the blob
// protocol (kv_blob_store.h). POSIX gives no atomic "write a file", but it gives atomic rename
// within a directory: write a temporary name, fsync its data, rename it over the final name and
// fsync the directory so the rename itself survives power loss.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace engram::storage {

// Writes `data` to `temp`, fsyncs, renames to `final_path` and fsyncs the directory; returns the
// XXH64 of the bytes, computed while writing. On failure the temporary file is removed and
// StorageFull (ENOSPC, EDQUOT, or EFBIG past RLIMIT_FSIZE, with SIGXFSZ ignored) or StoreError
// is thrown naming `temp` and `unit`; `final_path` is untouched.
std::uint64_t write_file_durably(const std::filesystem::path& temp,
                                 const std::filesystem::path& final_path,
                                 std::span<const std::byte> data, const std::string& unit);

// fsync of a directory: makes the creation, rename or removal of its entries durable.
void sync_directory(const std::filesystem::path& dir, const std::string& unit);

// Unlinks a file whose loss is only wasted space when it fails (a blob no row references any
// more: the next open's sweep retries); logs instead of throwing, so it can run after a commit.
void remove_file_quietly(const std::filesystem::path& file);

}  // namespace engram::storage
