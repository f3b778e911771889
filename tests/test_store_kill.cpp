// Crash safety under SIGKILL. storage_kill_writer writes conversations, utterances, segments
// and KV blobs in a loop and logs each commit after it returns; this suite kills it at random
// moments (during open, mid-transaction, between a blob's rename and its row) and after every
// kill checks that the store opens, PRAGMA integrity_check is ok, every logged commit reads back
// (text hashes, segment versions, blob checksums), every row's blob file is whole, no file is
// left unreferenced, and multi-row transactions are all-or-nothing.
//
// ENGRAM_STORE_KILLS sets the number of kills (default 200); tests/soak_store_kill.sh runs
// 10,000.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <QTemporaryDir>
#include <QtTest>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/kv_blob_store.h"
#include "storage/memory_repository.h"
#include "storage/xxh64.h"

extern char** environ;

using namespace engram::storage;
namespace fs = std::filesystem;

namespace {

std::uint64_t hash(const std::string& text) {
  return xxh64(std::as_bytes(std::span(text.data(), text.size())));
}

// What the writer's log promises, folded line by line.
struct Promises {
  std::map<std::int64_t, std::string> conversations;
  std::set<std::int64_t> deleting;  // "D?" seen without its "D"
  std::map<std::pair<std::int64_t, std::int64_t>, std::uint64_t> utterances;
  std::map<std::pair<std::int64_t, std::string>, std::pair<std::int64_t, std::uint64_t>> segments;
  // (conversation, unit, layer_begin) -> (generation, checksum)
  std::map<std::tuple<std::int64_t, std::int64_t, std::int32_t>,
           std::pair<std::uint64_t, std::uint64_t>>
      blobs;
  std::size_t lines = 0;

  void forget(std::int64_t id) {
    conversations.erase(id);
    deleting.erase(id);
    std::erase_if(utterances, [&](const auto& entry) { return entry.first.first == id; });
    std::erase_if(segments, [&](const auto& entry) { return entry.first.first == id; });
    std::erase_if(blobs, [&](const auto& entry) { return std::get<0>(entry.first) == id; });
  }

  void apply(const std::string& line) {
    ++lines;
    std::istringstream in(line);
    std::string tag;
    std::int64_t id = 0;
    in >> tag >> id;
    if (tag == "C") {
      in >> conversations[id];
    } else if (tag == "U") {
      std::int64_t index = 0;
      std::uint64_t text_hash = 0;
      in >> index >> text_hash;
      utterances[{id, index}] = text_hash;
    } else if (tag == "S") {
      std::string key;
      std::int64_t version = 0;
      std::uint64_t text_hash = 0;
      in >> key >> version >> text_hash;
      segments[{id, key}] = {version, text_hash};
    } else if (tag == "B") {
      std::int64_t unit = 0;
      std::int32_t begin = 0, end = 0;
      std::uint64_t generation = 0, checksum = 0;
      in >> unit >> begin >> end >> generation >> checksum;
      blobs[{id, unit, begin}] = {generation, checksum};
    } else if (tag == "D?") {
      deleting.insert(id);
    } else if (tag == "D") {
      forget(id);
    }
  }
};

// Reads the complete lines added to the log since the last call.
class LogReader {
 public:
  explicit LogReader(fs::path file) : file_(std::move(file)) {}
  void read_into(Promises& promises) {
    std::ifstream in(file_, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t start = 0;
    for (std::size_t end; (end = chunk.find('\n', start)) != std::string::npos; start = end + 1) {
      promises.apply(chunk.substr(start, end - start));
    }
    offset_ += start;
  }

 private:
  fs::path file_;
  std::size_t offset_ = 0;
};

struct Totals {
  std::size_t kills = 0;
  std::size_t swept = 0;
  std::size_t blobs_checked = 0;
  std::size_t rows_checked = 0;
};

// Returns the first broken promise, or an empty string.
std::string check_store(const fs::path& profile, Promises& promises, Totals& totals) {
  Database db(profile);
  totals.swept += db.swept_files();
  if (const auto problems = db.integrity_problems(); !problems.empty()) {
    return "integrity_check: " + problems.front();
  }
  ConversationRepository conversations(db);
  MemoryRepository memory(db);
  KvBlobStore blobs(db);

  // A delete that was logged as started either committed or did not; either is fine, but the
  // conversation must then be gone entirely or intact.
  for (std::int64_t id : std::set<std::int64_t>(promises.deleting)) {
    if (!conversations.find(id)) {
      promises.forget(id);
    } else {
      promises.deleting.erase(id);
    }
  }
  for (const auto& [id, name] : promises.conversations) {
    const std::optional<Conversation> c = conversations.find(id);
    if (!c || c->name != name) return "committed conversation " + std::to_string(id) + " lost";
  }
  // All-or-nothing: every conversation, logged or not, has what its creating transaction wrote.
  for (const Conversation& c : conversations.list()) {
    if (conversations.utterances(c.id, 0, 1).size() != 1 || !memory.find_segment(c.id, "init")) {
      return "conversation " + std::to_string(c.id) +
             " exists without its first utterance or "
             "segment: a transaction was torn";
    }
  }
  for (const auto& [key, text_hash] : promises.utterances) {
    const std::vector<Utterance> u = conversations.utterances(key.first, key.second, 1);
    if (u.size() != 1 || hash(u[0].text) != text_hash) {
      return "utterance " + std::to_string(key.first) + "/" + std::to_string(key.second) +
             " lost or changed";
    }
    ++totals.rows_checked;
  }
  for (const auto& [key, expected] : promises.segments) {
    const std::optional<MemorySegment> s = memory.find_segment(key.first, key.second);
    if (!s || s->version < expected.first ||
        (s->version == expected.first && hash(s->text) != expected.second)) {
      return "segment " + std::to_string(key.first) + "/" + key.second + " lost or changed";
    }
    ++totals.rows_checked;
  }
  for (const auto& [key, expected] : promises.blobs) {
    const auto [id, unit, begin] = key;
    const std::optional<KvBlobRecord> record =
        blobs.find({{id, "episode", unit}, begin, begin + 4});
    if (!record) return "blob of conversation " + std::to_string(id) + " lost";
    const auto generation = static_cast<std::uint64_t>(record->layout.positions.at(0));
    if (generation < expected.first ||
        (generation == expected.first && record->checksum != expected.second)) {
      return "blob of conversation " + std::to_string(id) + " went back in time";
    }
  }
  // Every row's file is whole (this reads and checksums every blob) ...
  std::set<std::string> referenced;
  for (const KvBlobRecord& record : blobs.list_all()) {
    try {
      blobs.verify(record);
    } catch (const std::exception& e) {
      return e.what();
    }
    referenced.insert(record.file_name);
    ++totals.blobs_checked;
  }
  // ... and the sweep at open left no file that no row references.
  for (const auto& entry : fs::directory_iterator(db.paths().kv)) {
    if (!referenced.contains(entry.path().filename().string())) {
      return "unreferenced file after open: " + entry.path().string();
    }
  }
  return {};
}

int kills_wanted() {
  const QByteArray value = qgetenv("ENGRAM_STORE_KILLS");
  return value.isEmpty() ? 200 : value.toInt();
}

}  // namespace

class TestStoreKill : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void killedWriterLeavesEveryCommitReadable() {
    QTemporaryDir dir;
    const fs::path profile = fs::path(dir.path().toStdString()) / "profile";
    const fs::path log = fs::path(dir.path().toStdString()) / "commits.log";
    Promises promises;
    LogReader reader(log);
    Totals totals;
    std::mt19937_64 random(20240611);
    const int kills = kills_wanted();
    const auto start = std::chrono::steady_clock::now();

    for (int kill = 0; kill < kills; ++kill) {
      const std::string seed = std::to_string(kill + 1);
      std::vector<std::string> args = {ENGRAM_STORAGE_KILL_WRITER, profile.string(), log.string(),
                                       seed};
      std::vector<char*> argv;
      for (std::string& arg : args)
        argv.push_back(arg.data());
      argv.push_back(nullptr);
      pid_t pid = 0;
      QCOMPARE(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);

      // A fifth of the kills land in the first milliseconds (exec, open, WAL recovery, sweep),
      // the rest anywhere in the write loop.
      const int delay_us = random() % 5 == 0 ? static_cast<int>(random() % 5000)
                                             : 5000 + static_cast<int>(random() % 75000);
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      ::kill(pid, SIGKILL);
      int status = 0;
      QCOMPARE(waitpid(pid, &status, 0), pid);
      QVERIFY2(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
               qPrintable(QStringLiteral("the writer stopped on its own before kill %1 (status %2)")
                              .arg(kill)
                              .arg(status)));
      ++totals.kills;

      reader.read_into(promises);
      const std::string broken = check_store(profile, promises, totals);
      QVERIFY2(broken.empty(),
               qPrintable(QStringLiteral("after kill %1: %2").arg(kill).arg(broken.c_str())));
      if ((kill + 1) % 1000 == 0) {
        qInfo("%d kills, %zu committed log lines verified so far", kill + 1, promises.lines);
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    qInfo(
        "%zu kills in %.1f s: %zu committed log lines, %zu rows and %zu blob reads verified, "
        "%zu orphan files swept at open",
        totals.kills, seconds, promises.lines, totals.rows_checked, totals.blobs_checked,
        totals.swept);
    QVERIFY2(promises.lines > static_cast<std::size_t>(kills), "the writer hardly committed");
  }
};

QTEST_MAIN(TestStoreKill)
#include "test_store_kill.moc"
