// Opening a profile: a fresh directory or an empty file gets the current schema with the stated
// pragmas; version-1 and version-2 databases are migrated forward with their rows intact (the
// columns of later steps at their defaults); a database from a newer Engram or a file that is
// not a database is refused with the file named and its bytes untouched; the default profile
// directory follows XDG.
#include <sqlite3.h>
#include <QTemporaryDir>
#include <QtTest>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>

#include "storage/database.h"
#include "storage/profile_paths.h"
#include "storage/schema.h"
#include "storage/sqlite_statement.h"
#include "storage/store_error.h"

using namespace engram::storage;
namespace fs = std::filesystem;

namespace {

// The message of the StoreError subclass E thrown by `call`, or a line saying what happened
// instead.
template <typename E>
std::pair<bool, QString> thrown(const std::function<void()>& call) {
  try {
    call();
  } catch (const E& e) {
    return {true, QString::fromStdString(e.what())};
  } catch (const std::exception& e) {
    return {false, QStringLiteral("wrong exception: ") + QString::fromUtf8(e.what())};
  }
  return {false, QStringLiteral("nothing thrown")};
}

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Runs SQL on a raw connection, outside our Database, to build files from other versions.
void raw_sql(const fs::path& file, const std::string& sql) {
  sqlite3* db = nullptr;
  QCOMPARE(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  const QString message = error ? QString::fromUtf8(error) : QString();
  sqlite3_free(error);
  sqlite3_close(db);
  QVERIFY2(rc == SQLITE_OK, qPrintable(message));
}

std::string pragma(Database& db, const std::string& name) {
  Statement statement(db, "PRAGMA " + name);
  return statement.step() ? statement.text(0) : std::string();
}

}  // namespace

class TestStoreSchema : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void freshProfileGetsCurrentSchemaAndDurablePragmas() {
    QTemporaryDir dir;
    const fs::path profile = fs::path(dir.path().toStdString()) / "nested" / "profile";
    Database db(profile);
    QCOMPARE(db.schema_version(), current_schema_version());
    QVERIFY(fs::exists(profile / "engram.db"));
    QVERIFY(fs::is_directory(profile / "kv"));
    QCOMPARE(pragma(db, "journal_mode"), std::string("wal"));
    QCOMPARE(pragma(db, "foreign_keys"), std::string("1"));
    QCOMPARE(pragma(db, "synchronous"), std::string("2"));  // FULL
    QCOMPARE(pragma(db, "busy_timeout"), std::string("5000"));
    QVERIFY(db.integrity_problems().empty());
  }

  void emptyFileIsMigratedFromNothing() {
    QTemporaryDir dir;
    const fs::path profile = dir.path().toStdString();
    write_bytes(profile / "engram.db", "");
    Database db(profile);
    QCOMPARE(db.schema_version(), current_schema_version());
    Statement tables(db, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'");
    QVERIFY(tables.step());
    QCOMPARE(tables.int64(0), 9);
  }

  void versionOneDatabaseIsMigratedForwardKeepingRows() {
    QTemporaryDir dir;
    const fs::path profile = dir.path().toStdString();
    const Migration& first = schema_migrations()[0];
    QCOMPARE(first.version, 1);
    raw_sql(profile / "engram.db",
            std::string(first.sql) +
                "PRAGMA user_version = 1;"
                "INSERT INTO conversations (name, created_ms, updated_ms) VALUES ('old', 5, 6);"
                "INSERT INTO utterances VALUES (1, 0, 'user', 'hello from v1', 7, 0, 4);");
    Database db(profile);
    QCOMPARE(db.schema_version(), current_schema_version());
    Statement row(db,
                  "SELECT c.name, c.created_ms, c.model_fingerprint, u.text FROM conversations c "
                  "JOIN utterances u ON u.conversation_id = c.id");
    QVERIFY(row.step());
    QCOMPARE(row.text(0), std::string("old"));
    QCOMPARE(row.int64(1), 5);
    QCOMPARE(row.text(2), std::string());  // the column version 2 added, at its default
    QCOMPARE(row.text(3), std::string("hello from v1"));
    QVERIFY(db.integrity_problems().empty());
  }

  void versionTwoDatabaseGetsMemoryPolicyColumnsAtTheirDefaults() {
    QCOMPARE(current_schema_version(), 3);
    QTemporaryDir dir;
    const fs::path profile = dir.path().toStdString();
    const std::span<const Migration> steps = schema_migrations();
    QCOMPARE(steps[1].version, 2);
    raw_sql(profile / "engram.db",
            std::string(steps[0].sql) + steps[1].sql +
                "PRAGMA user_version = 2;"
                "INSERT INTO conversations (name, created_ms, updated_ms, model_fingerprint) "
                "VALUES ('from v2', 5, 6, 'llama@v2');"
                "INSERT INTO utterances VALUES (1, 0, 'user', 'hello from v2', 7, 0, 4);"
                "INSERT INTO utterances VALUES (1, 1, 'assistant', 'hi', 8, 4, 6);");
    {
      Database db(profile);
      QCOMPARE(db.schema_version(), 3);
      Statement row(db,
                    "SELECT name, created_ms, updated_ms, model_fingerprint, memory_policy, "
                    "kv_budget, (SELECT count(*) FROM utterances) FROM conversations");
      QVERIFY(row.step());
      QCOMPARE(row.text(0), std::string("from v2"));
      QCOMPARE(row.int64(1), 5);
      QCOMPARE(row.int64(2), 6);
      QCOMPARE(row.text(3), std::string("llama@v2"));
      QCOMPARE(row.text(4), std::string());  // the app's default policy
      QCOMPARE(row.int64(5), 0);             // the policy's default budget
      QCOMPARE(row.int64(6), 2);
      QVERIFY(!row.step());
      QVERIFY(db.integrity_problems().empty());
    }
    // Read-only connections can open it now that it is current.
    Database reader(profile, Access::kReadOnly);
    QCOMPARE(reader.schema_version(), 3);
  }

  void newerSchemaIsRefusedAndFileLeftUntouched() {
    QTemporaryDir dir;
    const fs::path profile = dir.path().toStdString();
    const fs::path file = profile / "engram.db";
    raw_sql(file,
            "CREATE TABLE future (x); INSERT INTO future VALUES (42); "
            "PRAGMA user_version = 99;");
    const std::string before = read_bytes(file);

    auto [refused, message] = thrown<SchemaTooNew>([&] { Database db(profile); });
    QVERIFY2(refused, qPrintable(message));
    QVERIFY2(message.contains(QString::fromStdString(file.string())), qPrintable(message));
    QVERIFY2(message.contains("newer") && message.contains("99"), qPrintable(message));
    QVERIFY(read_bytes(file) == before);

    auto [refused_read_only, read_only_message] =
        thrown<SchemaTooNew>([&] { Database db(profile, Access::kReadOnly); });
    QVERIFY2(refused_read_only, qPrintable(read_only_message));
    QVERIFY(read_bytes(file) == before);
  }

  void fileThatIsNotADatabaseIsRefusedNamingIt() {
    QTemporaryDir dir;
    const fs::path profile = dir.path().toStdString();
    const fs::path file = profile / "engram.db";
    std::string junk(8192, '\0');
    for (std::size_t i = 0; i < junk.size(); ++i)
      junk[i] = static_cast<char>(i * 131 + 7);
    write_bytes(file, junk);
    auto [refused, message] = thrown<DatabaseCorrupt>([&] { Database db(profile); });
    QVERIFY2(refused, qPrintable(message));
    QVERIFY2(message.contains(QString::fromStdString(file.string())), qPrintable(message));
    QVERIFY(read_bytes(file) == junk);
  }

  void readOnlyOpenOfMissingDatabaseIsRefused() {
    QTemporaryDir dir;
    auto [refused, message] = thrown<NotFound>(
        [&] { Database db(fs::path(dir.path().toStdString()) / "none", Access::kReadOnly); });
    QVERIFY2(refused, qPrintable(message));
    QVERIFY(!fs::exists(fs::path(dir.path().toStdString()) / "none"));
  }

  void defaultProfileDirFollowsXdgDataHome() {
    const QByteArray saved_xdg = qgetenv("XDG_DATA_HOME");
    const QByteArray saved_home = qgetenv("HOME");
    qputenv("HOME", "/home/someone");
    qputenv("XDG_DATA_HOME", "/data/xdg");
    QCOMPARE(default_profile_dir(), fs::path("/data/xdg/engram"));
    qputenv("XDG_DATA_HOME", "relative/ignored");
    QCOMPARE(default_profile_dir(), fs::path("/home/someone/.local/share/engram"));
    qunsetenv("XDG_DATA_HOME");
    QCOMPARE(default_profile_dir(), fs::path("/home/someone/.local/share/engram"));
    if (saved_xdg.isNull()) {
      qunsetenv("XDG_DATA_HOME");
    } else {
      qputenv("XDG_DATA_HOME", saved_xdg);
    }
    qputenv("HOME", saved_home);
  }
};

QTEST_MAIN(TestStoreSchema)
#include "test_store_schema.moc"
