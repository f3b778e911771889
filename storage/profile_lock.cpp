#include "storage/profile_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "storage/store_error.h"

namespace engram::storage {

namespace {

long read_holder_pid(int fd) {
  char text[32] = {};
  const ssize_t n = pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return 0;
  return std::strtol(text, nullptr, 10);
}

}  // namespace

ProfileLock::ProfileLock(const std::filesystem::path& lock_file) {
  // O_CLOEXEC: a child process (a tool the engine runs) must not inherit and keep the lock.
  fd_ = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw StoreError(lock_file.string(), {},
                     std::string("cannot open the profile lock: ") + std::strerror(errno));
  }
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const long holder = error == EWOULDBLOCK ? read_holder_pid(fd_) : 0;
    ::close(fd_);
    fd_ = -1;
    if (error != EWOULDBLOCK) {
      throw StoreError(lock_file.string(), {},
                       std::string("cannot lock the profile: ") + std::strerror(error));
    }
    throw ProfileInUse(lock_file.string(), holder,
                       "profile in use by process " +
                           (holder > 0 ? std::to_string(holder) : std::string("(unknown pid)")) +
                           "; close the other Engram or choose another profile");
  }
  // The pid is informational only (the flock is the lock), so failures to write it are ignored.
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = pwrite(fd_, pid.data(), pid.size(), 0);
  }
}

ProfileLock::~ProfileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace engram::storage
