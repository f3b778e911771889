// Crash safety under SIGKILL. storage_kill_writer writes conversations, utterances, segments
// and KV blobs in a loop and logs each commit after it returns; this suite kills it at random
// moments (during open, mid-transaction, between a blob's rename and its row) and after every
// kill checks that the store opens, PRAGMA integrity_check is ok, every logged commit reads back
// (text hashes, segment versions, blob checksums), every row's blob file is whole, no file is
// left unreferenced, and multi-row transactions are all-or-nothing. The writer also saves KV the
// way the engine does (append-only "kv_run" blobs plus a replaced "kv_manifest", now and then
// cutting back to an earlier token), and every conversation's runs must then partition
// [0, stored end) exactly, with the last logged save or the one right after it visible: a
// committed save is never lost and a half save never shows.
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
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
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
  // conversation -> (stored end, manifest checksum) of its last KV save, logged or seen
  std::map<std::int64_t, std::pair<std::int64_t, std::uint64_t>> kv;
  std::size_t lines = 0;
  std::size_t kv_saves = 0;
  std::size_t kv_cuts = 0;  // logged saves whose end is below the previous one

  void forget(std::int64_t id) {
    conversations.erase(id);
    deleting.erase(id);
    kv.erase(id);
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
    } else if (tag == "R") {
      std::int64_t end = 0;
      std::uint64_t checksum = 0;
      in >> end >> checksum;
      ++kv_saves;
      if (const auto last = kv.find(id); last != kv.end() && end < last->second.first) ++kv_cuts;
      kv[id] = {end, checksum};
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
  std::size_t kv_runs_checked = 0;
};

constexpr const char* kModel = "kill-test-model";  // storage_kill_writer's fingerprint

// The KV runs and manifest of one conversation (storage_kill_writer's save_kv): the runs cover
// [0, stored end) in order with no gap or overlap, each run's bytes pass their checksum and hold
// their token indexes, and the manifest is the last promised save or the one after it (its
// bytes name the checksum of the manifest it replaced). What is seen becomes the promise, so a
// save that committed just before a kill but was never logged cannot be lost later either.
std::string check_kv(KvBlobStore& blobs, std::int64_t id, Promises& promises, Totals& totals) {
  const std::string who = "KV of conversation " + std::to_string(id);
  std::vector<KvBlobRecord> runs;  // list() orders them by unit id, their first token
  std::optional<KvBlobRecord> manifest;
  for (KvBlobRecord& record : blobs.list(id)) {
    if (record.key.unit.kind == "kv_run") runs.push_back(std::move(record));
    if (record.key.unit.kind == "kv_manifest") manifest = std::move(record);
  }
  const auto promised = promises.kv.find(id);
  if (!manifest) {
    if (!runs.empty()) return who + ": runs without a manifest, a save was torn";
    if (promised != promises.kv.end()) return who + ": a committed save was lost";
    return {};
  }
  if (manifest->layout.positions.size() != 1) return who + ": the manifest has no single end";
  const std::int64_t stored_end = manifest->layout.positions[0];
  std::int64_t next = 0;
  for (const KvBlobRecord& run : runs) {
    const std::string where = who + ": run at " + std::to_string(run.key.unit.id);
    if (run.key.unit.id != next) {
      return where + " where token " + std::to_string(next) + " was next (gap or overlap)";
    }
    const std::vector<std::int64_t>& positions = run.layout.positions;
    if (positions.empty() || run.layout.shape.empty() ||
        run.layout.shape[0] != static_cast<std::int64_t>(positions.size())) {
      return where + ": its layout does not match its positions";
    }
    KvBlobStore::Blob blob;
    try {
      blob = blobs.get(run.key, kModel);
    } catch (const std::exception& e) {
      return e.what();
    }
    const std::size_t token_bytes = blob.data.size() / positions.size();
    for (std::size_t t = 0; t < positions.size(); ++t) {
      std::int64_t index = 0;
      std::memcpy(&index, blob.data.data() + t * token_bytes, sizeof index);
      if (positions[t] != next || index != next) {
        return where + ": token " + std::to_string(next) + " is missing or misplaced";
      }
      ++next;
    }
    ++totals.kv_runs_checked;
  }
  if (next != stored_end) {
    return who + ": the runs end at " + std::to_string(next) + ", the manifest says " +
           std::to_string(stored_end);
  }
  std::int64_t words[3] = {};  // stored end, checksum of the replaced manifest, generation
  try {
    const KvBlobStore::Blob blob = blobs.get(manifest->key, kModel);
    if (blob.data.size() != sizeof words) return who + ": the manifest has the wrong size";
    std::memcpy(words, blob.data.data(), sizeof words);
  } catch (const std::exception& e) {
    return e.what();
  }
  if (words[0] != stored_end) return who + ": the manifest's bytes and row disagree";
  const auto previous = static_cast<std::uint64_t>(words[1]);
  if (promised == promises.kv.end()) {
    if (previous != 0) return who + ": a save shows on top of a save nobody saw";
  } else {
    const auto [end, checksum] = promised->second;
    const bool same = manifest->checksum == checksum && stored_end == end;
    if (!same && previous != checksum) {
      return who + " ends at " + std::to_string(stored_end) +
             ", which is neither the last committed save (end " + std::to_string(end) +
             ") nor the one after it";
    }
  }
  promises.kv[id] = {stored_end, manifest->checksum};
  return {};
}

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
  for (const auto& [id, expected] : promises.kv) {
    if (!conversations.find(id)) return "conversation " + std::to_string(id) + " with KV lost";
  }
  for (const Conversation& c : conversations.list()) {
    if (std::string broken = check_kv(blobs, c.id, promises, totals); !broken.empty()) {
      return broken;
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
        "%zu orphan files swept at open; %zu KV saves (%zu cuts) logged, %zu KV runs checked",
        totals.kills, seconds, promises.lines, totals.rows_checked, totals.blobs_checked,
        totals.swept, promises.kv_saves, promises.kv_cuts, totals.kv_runs_checked);
    QVERIFY2(promises.lines > static_cast<std::size_t>(kills), "the writer hardly committed");
    QVERIFY2(kills < 50 ||
                 (promises.kv_saves > static_cast<std::size_t>(kills) / 4 && promises.kv_cuts > 0),
             "the writer hardly saved KV");
  }
};

QTEST_MAIN(TestStoreKill)
#include "test_store_kill.moc"
