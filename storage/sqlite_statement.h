// A prepared SQLite statement with typed binds and columns. Errors go through Database::fail so
// every message names the database file and the unit the statement worked on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3_stmt;

namespace engram::storage {

class Database;

class Statement {
 public:
  Statement(Database& db, std::string_view sql, std::string unit = {});
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based, as in SQLite.
  Statement& bind(int index, std::int64_t value);
  Statement& bind(int index, int value) { return bind(index, static_cast<std::int64_t>(value)); }
  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, const std::optional<std::int64_t>& value);
  Statement& bind_blob(int index, std::span<const std::byte> bytes);
  // Vectors are stored as little-endian arrays (the hosts we build for are little-endian).
  Statement& bind_floats(int index, const std::vector<float>& values);
  Statement& bind_int64s(int index, const std::vector<std::int64_t>& values);

  bool step();  // true when a row is ready
  void run();   // steps a statement that returns no rows
  void reset();

  // Columns are 0-based, as in SQLite.
  std::int64_t int64(int column) const;
  std::optional<std::int64_t> optional_int64(int column) const;
  std::string text(int column) const;
  std::vector<std::byte> blob(int column) const;
  std::vector<float> floats(int column) const;
  std::vector<std::int64_t> int64s(int column) const;

 private:
  Database& db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string unit_;
};

}  // namespace engram::storage
