#include "storage/sqlite_statement.h"

#include <sqlite3.h>

#include <bit>
#include <cstring>

#include "storage/database.h"
#include "storage/store_error.h"

namespace engram::storage {

static_assert(std::endian::native == std::endian::little,
              "vectors are stored as little-endian arrays");

namespace {

template <typename T>
std::vector<T> decode_array(const void* data, int bytes, const std::string& file,
                            const std::string& unit) {
  if (bytes % sizeof(T) != 0) {
    throw DatabaseCorrupt(file, unit,
                          "array column of " + std::to_string(bytes) +
                              " bytes is not a whole number of " + std::to_string(sizeof(T)) +
                              "-byte values");
  }
  std::vector<T> values(bytes / sizeof(T));
  if (bytes > 0) std::memcpy(values.data(), data, bytes);
  return values;
}

}  // namespace

Statement::Statement(Database& db, std::string_view sql, std::string unit)
    : db_(db), unit_(std::move(unit)) {
  const int rc =
      sqlite3_prepare_v2(db.handle(), sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
  if (rc != SQLITE_OK) db_.fail(rc, unit_, "preparing '" + std::string(sql) + "'");
}

Statement::~Statement() {
  sqlite3_finalize(stmt_);
}

Statement& Statement::bind(int index, std::int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) db_.fail(rc, unit_, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
  const int rc =
      sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) db_.fail(rc, unit_, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind(int index, const std::optional<std::int64_t>& value) {
  if (value) return bind(index, *value);
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) db_.fail(rc, unit_, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind_blob(int index, std::span<const std::byte> bytes) {
  // A zero-length blob must still be a blob, not NULL: pass a non-null pointer.
  static const std::byte empty{};
  const int rc = sqlite3_bind_blob64(stmt_, index, bytes.empty() ? &empty : bytes.data(),
                                     bytes.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) db_.fail(rc, unit_, "binding parameter " + std::to_string(index));
  return *this;
}

Statement& Statement::bind_floats(int index, const std::vector<float>& values) {
  return bind_blob(index, std::as_bytes(std::span(values)));
}

Statement& Statement::bind_int64s(int index, const std::vector<std::int64_t>& values) {
  return bind_blob(index, std::as_bytes(std::span(values)));
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_.fail(rc, unit_, std::string("running '") + sqlite3_sql(stmt_) + "'");
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::int64_t Statement::int64(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

std::optional<std::int64_t> Statement::optional_int64(int column) const {
  if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int64(stmt_, column);
}

std::string Statement::text(int column) const {
  const auto* data = sqlite3_column_text(stmt_, column);
  const int bytes = sqlite3_column_bytes(stmt_, column);
  return data ? std::string(reinterpret_cast<const char*>(data), bytes) : std::string();
}

std::vector<std::byte> Statement::blob(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  const int bytes = sqlite3_column_bytes(stmt_, column);
  return decode_array<std::byte>(data, bytes, db_.file(), unit_);
}

std::vector<float> Statement::floats(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  return decode_array<float>(data, sqlite3_column_bytes(stmt_, column), db_.file(), unit_);
}

std::vector<std::int64_t> Statement::int64s(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  return decode_array<std::int64_t>(data, sqlite3_column_bytes(stmt_, column), db_.file(), unit_);
}

}  // namespace engram::storage
