// Damaging a conversation database on disk the way a bad sector or a stray write would, for the
// corruption tests of the store and of the app: find the overflow pages that hold long texts
// (SQLite's dbstat table) and overwrite bytes in them.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace engram::test {

// Page numbers of the overflow pages under `table`.
inline std::vector<std::int64_t> overflow_pages(const std::filesystem::path& file,
                                                const char* table) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* statement = nullptr;
  sqlite3_prepare_v2(db, "SELECT pageno FROM dbstat WHERE name = ?1 AND pagetype = 'overflow'", -1,
                     &statement, nullptr);
  sqlite3_bind_text(statement, 1, table, -1, SQLITE_STATIC);
  std::vector<std::int64_t> pages;
  while (sqlite3_step(statement) == SQLITE_ROW)
    pages.push_back(sqlite3_column_int64(statement, 0));
  sqlite3_finalize(statement);
  sqlite3_close(db);
  return pages;
}

inline void overwrite(const std::filesystem::path& file, std::uintmax_t offset,
                      const std::string& bytes) {
  std::fstream out(file, std::ios::binary | std::ios::in | std::ios::out);
  out.seekp(static_cast<std::streamoff>(offset));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace engram::test
