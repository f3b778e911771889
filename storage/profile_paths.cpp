#include "storage/profile_paths.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>

#include "storage/store_error.h"

namespace engram::storage {

ProfilePaths profile_paths(const std::filesystem::path& profile_dir) {
  return {profile_dir, profile_dir / "engram.db", profile_dir / "engram.lock", profile_dir / "kv"};
}

std::filesystem::path default_profile_dir() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::filesystem::path(xdg) / "engram";
  const char* home = std::getenv("HOME");
  if (home == nullptr || home[0] == '\0') {
    const passwd* entry = getpwuid(getuid());
    if (entry == nullptr || entry->pw_dir == nullptr) {
      throw StoreError({}, {}, "cannot find the home directory (HOME unset, no passwd entry)");
    }
    home = entry->pw_dir;
  }
  return std::filesystem::path(home) / ".local" / "share" / "engram";
}

}  // namespace engram::storage
