// Where a profile lives. A profile is one directory holding the database (engram.db and its
// -wal/-shm companions), the lock file (engram.lock) and the KV blob files (kv/). Keeping them
// together lets a person copy or delete a profile as one folder.
#pragma once

#include <filesystem>

namespace engram::storage {

struct ProfilePaths {
  std::filesystem::path dir;
  std::filesystem::path database;  // dir/engram.db
  std::filesystem::path lock;      // dir/engram.lock
  std::filesystem::path kv;        // dir/kv
};

ProfilePaths profile_paths(const std::filesystem::path& profile_dir);

// $XDG_DATA_HOME/engram, or ~/.local/share/engram when XDG_DATA_HOME is unset, empty or
// relative (the XDG Base Directory specification says relative values are to be ignored).
std::filesystem::path default_profile_dir();

}  // namespace engram::storage
