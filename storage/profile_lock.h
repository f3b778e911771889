// One writer process per profile. Two processes writing the same KV directory could each
// collect the other's fresh blob files as orphans, so the second opener is refused: it takes an
// exclusive flock(2) on <profile>/engram.lock without waiting and, when that fails, reports the
// pid the holder wrote into the file. The kernel drops the lock when the holder dies (even by
// SIGKILL), so a crash never leaves a stale lock behind.
#pragma once

#include <filesystem>

namespace engram::storage {

class ProfileLock {
 public:
  // Throws ProfileInUse naming the holder's pid, or StoreError when the file cannot be opened.
  explicit ProfileLock(const std::filesystem::path& lock_file);
  ~ProfileLock();
  ProfileLock(const ProfileLock&) = delete;
  ProfileLock& operator=(const ProfileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace engram::storage
