// The app's memory survives a restart, with the fixture model on the CPU: after each answer the
// worker saves the conversation's KV in the store; a new window (a new Assistant, the profile
// lock released and taken again) reads it back instead of re-reading the history, so the next
// answer reuses every stored token; the memory inspector shows that KV on disk before it is read
// and on the device after, with totals equal to the store's blob sizes; and a damaged blob costs a
// rebuild from text and a message, never the conversation.
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>
#include <filesystem>
#include <fstream>
#include <memory>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/kv_blob_store.h"
#include "storage/store_error.h"
#include "ui/chat_view.h"
#include "ui/conversation_list.h"
#include "ui/main_window.h"
#include "ui/memory_inspector.h"
#include "ui_test_support.h"

using engram::MemoryLocation;
using engram::MemorySnapshot;
using engram::ui::MainWindow;
using engram::ui::MainWindowOptions;
namespace fs = std::filesystem;

namespace {

constexpr int kReplyTimeoutMs = 120000;

// The KV of a conversation as the store's index lists it (append-only runs, their ids and the
// manifest: core/engine/conversation_store.h): the newest run is the file a save added.
struct StoredKv {
  int64_t tokens = 0;
  int64_t kv_bytes = 0;
  int64_t token_id_bytes = 0;
  std::string kv_file;
  engram::storage::KvBlobRecord kv_record;
};

StoredKv stored_kv(const QString& profile, int64_t conversation) {
  engram::storage::Database db(profile.toStdString(), engram::storage::Access::kReadOnly);
  StoredKv out;
  int64_t newest = -1;
  for (const auto& r : engram::storage::KvBlobStore(db).list(conversation)) {
    if (r.key.unit.kind == "kv_run") {
      out.kv_bytes += r.byte_size;
      if (r.key.unit.id > newest) {
        newest = r.key.unit.id;
        out.kv_file = r.file_name;
        out.kv_record = r;
      }
    } else if (r.key.unit.kind == "kv_run_ids") {
      out.tokens += r.layout.shape.at(0);
      out.token_id_bytes += r.byte_size;
    }
  }
  return out;
}

int64_t bytes_at(const MemorySnapshot& s, MemoryLocation where) {
  return s.bytes_by_location[static_cast<int>(where)];
}
int64_t tokens_at(const MemorySnapshot& s, MemoryLocation where) {
  return s.tokens_by_location[static_cast<int>(where)];
}
// Where the engine's cache lives ("auto" picks a GPU when there is one).
MemoryLocation device_of(const MemorySnapshot& s) {
  return s.engine_device.rfind("cuda", 0) == 0 ? MemoryLocation::kGpu : MemoryLocation::kCpu;
}

// What the inspector showed at one moment: its snapshot and the text of its location column.
struct Shown {
  MemorySnapshot snapshot;
  QStringList locations;
  QString totals;
};

}  // namespace

class UiRestoreTest : public QObject {
  Q_OBJECT

 private:
  QString profile(const QString& name) const { return dir_.filePath(name); }

  // A window on `name`, waiting for the model and the start-up reopen of the last conversation.
  // Every snapshot the inspector shows and every restore go to shown_ and restores_.
  std::unique_ptr<MainWindow> open_window(const QString& name) {
    shown_.clear();
    restores_.clear();
    MainWindowOptions o;
    o.profile_dir = profile(name);
    o.settings_file = profile(name + QStringLiteral(".ini"));
    auto w = std::make_unique<MainWindow>(o);
    MainWindow* window = w.get();
    connect(w->inspector(), &engram::ui::MemoryInspector::snapshotShown, window,
            [this, window](const MemorySnapshot& s) {
              Shown shown{s, {}, window->inspector()->totals_text()};
              const auto* model = window->inspector()->model();
              for (int row = 0; row < model->rowCount(); ++row) {
                shown.locations << model
                                       ->data(model->index(row,
                                                           engram::ui::MemoryUnitsModel::kLocation),
                                              Qt::DisplayRole)
                                       .toString();
              }
              shown_.push_back(shown);
            });
    connect(w.get(), &MainWindow::memoryRestored, window,
            [this](const engram::MemoryRestore& r) { restores_.push_back(r); });
    engram::ui_test::show_and_wait_ready(*w);
    engram::ui_test::set_greedy(*w, 24);
    return w;
  }

  // The save runs on the worker after the answer is shown: it is done when the inspector reports
  // the store holding every cached token.
  static void wait_saved(MainWindow& w) {
    QTRY_VERIFY_WITH_TIMEOUT(!w.busy(), kReplyTimeoutMs);
    QTRY_VERIFY_WITH_TIMEOUT(w.inspector()->model()->snapshot().stored_tokens > 0 &&
                                 w.inspector()->model()->snapshot().stored_tokens ==
                                     w.inspector()->model()->snapshot().engine_cached_tokens,
                             kReplyTimeoutMs);
  }

  // A conversation of `turns` answers in profile `name`, saved; the window is closed after it.
  qint64 chat_and_close(const QString& name, int turns) {
    auto w = open_window(name);
    if (!w->model_loaded()) return 0;
    for (int i = 0; i < turns; ++i) {
      w->sendText(QStringLiteral("Question number %1: tell me about rivers and the sea.").arg(i));
      wait_saved(*w);
      if (!w->error_text().isEmpty()) return 0;
    }
    return w->current_conversation();
  }

  QTemporaryDir dir_;
  QList<Shown> shown_;
  QList<engram::MemoryRestore> restores_;

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    engram::ui_test::use_fixture_model();
  }

  void answerAfterRestartReusesTheStoredTokens() {
    const QString name = QStringLiteral("restart");
    const qint64 id = chat_and_close(name, 2);
    QVERIFY(id != 0);
    // Closed: the whole history's KV is in the store, with the ids it was computed for.
    const StoredKv before = stored_kv(profile(name), id);
    QVERIFY(before.tokens > 20);
    QVERIFY(before.kv_bytes > 0);
    QCOMPARE(before.token_id_bytes, before.tokens * 8);

    auto w = open_window(name);
    QVERIFY2(w->model_loaded(), qPrintable(w->error_text()));
    QCOMPARE(w->current_conversation(), id);
    QCOMPARE(w->chat()->count(), 4);
    QTRY_VERIFY_WITH_TIMEOUT(!restores_.isEmpty(), 20000);
    QVERIFY2(restores_.back().restored, restores_.back().notice.c_str());
    QCOMPARE(restores_.back().tokens, before.tokens);
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));

    // The next answer streams, and its prompt reuses every stored token: no re-prefill.
    engram::AssistantSampling s = w->sampling();
    s.temperature = 0.8;
    s.seed = 7;
    s.max_new_tokens = 48;
    w->set_sampling(s);
    engram::ui_test::StreamedTexts streamed(*w);
    const QStringList& seen = streamed.seen();
    w->sendText(QStringLiteral("And what about gardens?"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    streamed.stop();
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QCOMPARE(w->chat()->count(), 6);
    const engram::ReplyStats& stats = w->chat()->last()->stats();
    QCOMPARE(stats.reused_tokens, before.tokens);
    QVERIFY(stats.prompt_tokens > 0);
    QVERIFY(stats.generated_tokens > 0);
    const QString answer = w->chat()->last()->text();
    QVERIFY(!answer.isEmpty());
    QVERIFY2(seen.size() >= 3, qPrintable(QStringLiteral("saw %1 partial texts").arg(seen.size())));
    for (const QString& t : seen)
      QVERIFY(answer.startsWith(t) || t.isEmpty());
    QVERIFY(w->chat()->last()->stats_text().contains(
        QStringLiteral("%1 prompt tokens reused").arg(before.tokens)));
    // And that turn is saved too, replacing the blob.
    wait_saved(*w);
    const StoredKv after = stored_kv(profile(name), id);
    QVERIFY(after.tokens > before.tokens + stats.prompt_tokens);
    QVERIFY(after.kv_file != before.kv_file);
  }

  void inspectorShowsStoredKvOnDiskThenOnTheDevice() {
    const QString name = QStringLiteral("inspector");
    const qint64 id = chat_and_close(name, 2);
    QVERIFY(id != 0);
    const StoredKv stored = stored_kv(profile(name), id);
    QVERIFY(stored.tokens > 0);

    auto w = open_window(name);
    QVERIFY2(w->model_loaded(), qPrintable(w->error_text()));
    QCOMPARE(w->current_conversation(), id);
    QTRY_VERIFY_WITH_TIMEOUT(!restores_.isEmpty(), 20000);
    QVERIFY2(restores_.back().restored, restores_.back().notice.c_str());
    // Let the snapshot sent after the restore arrive.
    QTRY_VERIFY(!shown_.isEmpty() && shown_.back().snapshot.engine_cached_tokens > 0);

    // Before it was read: the conversation's KV on disk, nothing in the engine.
    qsizetype on_disk = -1;
    for (qsizetype i = 0; i < shown_.size() && on_disk < 0; ++i) {
      if (shown_[i].snapshot.conversation_id == id &&
          bytes_at(shown_[i].snapshot, MemoryLocation::kDisk) > 0)
        on_disk = i;
    }
    QVERIFY2(on_disk >= 0, "the inspector never showed the stored KV on disk");
    const Shown& disk = shown_[on_disk];
    QCOMPARE(bytes_at(disk.snapshot, MemoryLocation::kDisk), stored.kv_bytes);
    QCOMPARE(tokens_at(disk.snapshot, MemoryLocation::kDisk), stored.tokens);
    QCOMPARE(bytes_at(disk.snapshot, MemoryLocation::kCpu), int64_t{0});
    QCOMPARE(bytes_at(disk.snapshot, MemoryLocation::kGpu), int64_t{0});
    QCOMPARE(bytes_at(disk.snapshot, MemoryLocation::kPinnedCpu), int64_t{0});
    QCOMPARE(disk.snapshot.engine_cached_tokens, int64_t{0});
    QCOMPARE(disk.snapshot.stored_kv_bytes, stored.kv_bytes);
    QCOMPARE(disk.snapshot.stored_token_id_bytes, stored.token_id_bytes);
    int64_t unit_bytes = 0;
    int utterances_on_disk = 0;
    for (const auto& u : disk.snapshot.units) {
      unit_bytes += u.bytes;
      if (u.bytes > 0) QCOMPARE(int(u.location), int(MemoryLocation::kDisk));
      utterances_on_disk += u.kind == "utterance" && u.state == "stored" ? 1 : 0;
    }
    QCOMPARE(unit_bytes, stored.kv_bytes);
    QCOMPARE(utterances_on_disk, 4);
    QVERIFY2(disk.locations.contains(QStringLiteral("disk")), qPrintable(disk.locations.join(',')));
    QVERIFY2(!disk.locations.contains(QStringLiteral("CPU")) &&
                 !disk.locations.contains(QStringLiteral("GPU")),
             qPrintable(disk.locations.join(',')));
    QVERIFY2(disk.totals.contains(QStringLiteral("disk: %1 tokens").arg(stored.tokens)),
             qPrintable(disk.totals));

    // After it was read: the same bytes in the engine's cache on the device, none on disk.
    const Shown& loaded = shown_.back();
    QVERIFY(shown_.size() - 1 > on_disk);
    const MemoryLocation device = device_of(loaded.snapshot);
    QCOMPARE(loaded.snapshot.engine_cached_tokens, stored.tokens);
    QCOMPARE(loaded.snapshot.engine_cache_bytes, stored.kv_bytes);  // the blob is the cache's dtype
    QCOMPARE(bytes_at(loaded.snapshot, device), stored.kv_bytes);
    QCOMPARE(tokens_at(loaded.snapshot, device), stored.tokens);
    QCOMPARE(bytes_at(loaded.snapshot, MemoryLocation::kDisk), int64_t{0});
    QVERIFY2(loaded.locations.contains(QString::fromUtf8(engram::memory_location_name(device))),
             qPrintable(loaded.locations.join(',')));
    QVERIFY2(!loaded.locations.contains(QStringLiteral("disk")),
             qPrintable(loaded.locations.join(',')));
    // The store's copy is still there, and the panel says so.
    QCOMPARE(loaded.snapshot.stored_kv_bytes, stored.kv_bytes);
    QVERIFY2(
        loaded.totals.contains(QStringLiteral("saved in the store: %1 tokens").arg(stored.tokens)),
        qPrintable(loaded.totals));

    // Live: a new answer grows the cache on the device and, once saved, the store by as much.
    w->sendText(QStringLiteral("One more, please."));
    wait_saved(*w);
    const MemorySnapshot& now = w->inspector()->model()->snapshot();
    const StoredKv grown = stored_kv(profile(name), id);
    QVERIFY(grown.tokens > stored.tokens);
    QCOMPARE(now.engine_cached_tokens, grown.tokens);
    QCOMPARE(bytes_at(now, device), grown.kv_bytes);
    QCOMPARE(now.stored_kv_bytes, grown.kv_bytes);
    QCOMPARE(bytes_at(now, MemoryLocation::kDisk), int64_t{0});
  }

  void damagedBlobRebuildsFromTextAndSaysSo() {
    const QString name = QStringLiteral("damaged");
    const qint64 id = chat_and_close(name, 1);
    QVERIFY(id != 0);
    const StoredKv stored = stored_kv(profile(name), id);
    QVERIFY(stored.tokens > 0);
    const fs::path file = fs::path(profile(name).toStdString()) / "kv" / stored.kv_file;
    QVERIFY2(fs::exists(file), file.c_str());
    {
      std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
      const auto offset = static_cast<std::streamoff>(fs::file_size(file) / 2);
      f.seekg(offset);
      char byte = 0;
      f.read(&byte, 1);
      byte = static_cast<char>(~byte);
      f.seekp(offset);
      f.write(&byte, 1);
    }

    auto w = open_window(name);
    QVERIFY2(w->model_loaded(), qPrintable(w->error_text()));
    // The conversation opens with all its text...
    QCOMPARE(w->current_conversation(), id);
    QCOMPARE(w->chat()->count(), 2);
    // ...its KV is refused by the checksum, and the window says so, naming the file.
    QTRY_VERIFY_WITH_TIMEOUT(!restores_.isEmpty(), 20000);
    QVERIFY(!restores_.back().restored);
    QVERIFY(restores_.back().damaged);
    QTRY_VERIFY(!w->error_text().isEmpty());
    const QString message = w->error_text();
    QVERIFY2(message.contains(QStringLiteral("damaged")), qPrintable(message));
    QVERIFY2(message.contains(QString::fromStdString(stored.kv_file)), qPrintable(message));
    QVERIFY2(message.contains(QStringLiteral("rebuilt from the text")), qPrintable(message));
    // Nothing of it is in the engine: the text is what the next answer starts from.
    QTRY_VERIFY(!shown_.isEmpty() && shown_.back().snapshot.conversation_id == id);
    const MemorySnapshot& text_only = shown_.back().snapshot;
    QCOMPARE(text_only.engine_cached_tokens, int64_t{0});
    QCOMPARE(bytes_at(text_only, device_of(text_only)), int64_t{0});
    QCOMPARE(bytes_at(text_only, MemoryLocation::kDisk), int64_t{0});

    // The answer works, rebuilt from text: nothing reused, the whole history prefilled.
    w->sendText(QStringLiteral("Still there?"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QCOMPARE(w->chat()->count(), 4);
    QVERIFY(!w->chat()->last()->text().isEmpty());
    const engram::ReplyStats& stats = w->chat()->last()->stats();
    QCOMPARE(stats.reused_tokens, int64_t{0});
    QVERIFY(stats.prompt_tokens > stored.tokens);
    // Its save replaces the damaged blob with one that passes its checksum.
    wait_saved(*w);
    const StoredKv replaced = stored_kv(profile(name), id);
    QVERIFY(replaced.kv_file != stored.kv_file);
    QVERIFY(replaced.tokens > stored.tokens);
    {
      engram::storage::Database db(profile(name).toStdString(), engram::storage::Access::kReadOnly);
      engram::storage::KvBlobStore(db).verify(replaced.kv_record);
    }
    w.reset();
    // So the next start restores it.
    auto again = open_window(name);
    QTRY_VERIFY_WITH_TIMEOUT(!restores_.isEmpty(), 20000);
    QVERIFY2(restores_.back().restored, restores_.back().notice.c_str());
    QCOMPARE(restores_.back().tokens, replaced.tokens);
    QVERIFY2(again->error_text().isEmpty(), qPrintable(again->error_text()));
  }
};

QTEST_MAIN(UiRestoreTest)
#include "test_ui_restore.moc"
