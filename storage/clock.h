// Wall-clock time as stored in the database: Unix milliseconds (readable by any SQLite tool with
// datetime(x / 1000, 'unixepoch')).
#pragma once

#include <chrono>
#include <cstdint>

namespace engram::storage {

inline std::int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace engram::storage
