#include "storage/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "storage/store_error.h"
#include "storage/xxh64.h"

namespace engram::storage {

namespace {

// Linux writes at most 0x7ffff000 bytes per call; smaller chunks also keep the checksum's pass
// over the data in cache right after the copy.
constexpr std::size_t kWriteChunk = std::size_t{8} << 20;

[[noreturn]] void throw_io(const std::filesystem::path& file, const std::string& unit,
                           const std::string& action, int error) {
  const std::string problem = action + ": " + std::strerror(error);
  if (error == ENOSPC || error == EDQUOT || error == EFBIG) {
    throw StorageFull(file.string(), unit, problem + "; nothing was saved");
  }
  throw StoreError(file.string(), unit, problem);
}

}  // namespace

void remove_file_quietly(const std::filesystem::path& file) {
  if (::unlink(file.c_str()) != 0 && errno != ENOENT) {
    log::warn("storage: cannot remove " + file.string() + ": " + std::strerror(errno));
  }
}

void sync_directory(const std::filesystem::path& dir, const std::string& unit) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_io(dir, unit, "opening the directory to sync it", errno);
  const int rc = fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) throw_io(dir, unit, "syncing the directory", error);
}

std::uint64_t write_file_durably(const std::filesystem::path& temp,
                                 const std::filesystem::path& final_path,
                                 std::span<const std::byte> data, const std::string& unit) {
  // O_EXCL: a leftover temporary of the same name is never appended to.
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_io(temp, unit, "creating the temporary blob file", errno);
  auto abandon = [&](const std::string& action, int error) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw_io(temp, unit, action, error);
  };

  Xxh64 checksum;
  std::size_t written = 0;
  while (written < data.size()) {
    const std::size_t chunk = std::min(kWriteChunk, data.size() - written);
    const ssize_t n = ::write(fd, data.data() + written, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("writing byte " + std::to_string(written) + " of " + std::to_string(data.size()),
              errno);
    }
    // A short write means the next call hits the limit; the loop gets its errno then.
    checksum.update(data.subspan(written, static_cast<std::size_t>(n)));
    written += static_cast<std::size_t>(n);
  }
  // The data must be on disk before the rename makes the name point at it; otherwise a power
  // loss could leave the final name on an empty or partial file.
  if (fsync(fd) != 0) abandon("syncing", errno);
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw_io(temp, unit, "closing", error);
  }
  if (std::rename(temp.c_str(), final_path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw_io(final_path, unit, "renaming the temporary blob file into place", error);
  }
  try {
    sync_directory(final_path.parent_path(), unit);
  } catch (...) {
    ::unlink(final_path.c_str());
    throw;
  }
  return checksum.digest();
}

}  // namespace engram::storage
