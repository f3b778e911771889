// The desktop window end to end with the fixture model on the CPU: a chat streams tokens into the
// view and lands in the store, a new window on the same profile brings the conversation back, copy
// and regenerate act on the last answer, the memory inspector updates while the answer streams and
// its totals equal the engine's cache, the timeline keeps earlier requests to pick from, the UI
// thread never stalls while the worker generates, and an answer's memory line sits under its stats.
#include <QClipboard>
#include <QElapsedTimer>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTimer>
#include <QToolButton>
#include <QtTest>
#include <memory>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "ui/chat_view.h"
#include "ui/conversation_list.h"
#include "ui/main_window.h"
#include "ui/memory_inspector.h"
#include "ui/model_bar.h"
#include "ui/timeline_panel.h"
#include "ui_test_support.h"

#include <QComboBox>
#include <algorithm>

using engram::ui::MainWindow;
using engram::ui::MainWindowOptions;

namespace {
constexpr int kReplyTimeoutMs = 120000;
}  // namespace

class UiChatTest : public QObject {
  Q_OBJECT

 private:
  // Callers check model_loaded(): the window shows why a model did not load.
  std::unique_ptr<MainWindow> open_window() {
    MainWindowOptions o;
    o.profile_dir = dir_.filePath(QStringLiteral("profile"));
    o.settings_file = dir_.filePath(QStringLiteral("settings.ini"));
    auto w = std::make_unique<MainWindow>(o);
    engram::ui_test::show_and_wait_ready(*w);
    engram::AssistantSampling s;
    s.temperature = 0;  // greedy: the same answer every run
    s.max_new_tokens = 48;
    w->set_sampling(s);
    return w;
  }

  static void wait_reply(MainWindow& w) { QTRY_VERIFY_WITH_TIMEOUT(!w.busy(), kReplyTimeoutMs); }

  QTemporaryDir dir_;
  QString first_answer_;

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    engram::ui_test::use_fixture_model();
  }

  void chatStreamsTokensAndStoresConversation() {
    auto w = open_window();
    QVERIFY2(w->model_loaded(), qPrintable(w->error_text()));
    QSignalSpy done(w.get(), &MainWindow::replyDone);
    // Watch the answer grow while the worker generates.
    engram::ui_test::StreamedTexts streamed(*w);
    const QStringList& seen = streamed.seen();
    w->sendText(QStringLiteral("Hello, who are you?"));
    QVERIFY(w->busy());
    QVERIFY(done.wait(kReplyTimeoutMs));
    streamed.stop();
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QCOMPARE(w->chat()->count(), 2);
    const QString answer = w->chat()->at(1)->text();
    QVERIFY(!answer.isEmpty());
    // Streamed: several partial texts, each a prefix of the final answer.
    QVERIFY2(seen.size() >= 3, qPrintable(QStringLiteral("saw %1 partial texts").arg(seen.size())));
    for (const QString& s : seen)
      QVERIFY(answer.startsWith(s) || s.isEmpty());
    QVERIFY(w->chat()->at(1)->stats_text().contains(QStringLiteral("tokens/s")));
    QVERIFY(w->chat()->at(1)->stats_text().contains(QStringLiteral("first token")));
    // A short chat moves nothing out of attention: no memory line.
    QVERIFY(w->chat()->at(1)->memory_note_text().isEmpty());
    first_answer_ = answer;

    // In the store, read through the UI's kind of connection.
    QTRY_VERIFY(w->current_conversation() != 0);
    {
      engram::storage::Database db(dir_.filePath(QStringLiteral("profile")).toStdString(),
                                   engram::storage::Access::kReadOnly);
      engram::storage::ConversationRepository repo(db);
      const auto list = repo.list();
      QCOMPARE(list.size(), size_t(1));
      const auto utterances = repo.utterances(list[0].id);
      QCOMPARE(utterances.size(), size_t(2));
      QCOMPARE(QString::fromStdString(utterances[0].text), QStringLiteral("Hello, who are you?"));
      QCOMPARE(utterances[0].role, std::string("user"));
      QCOMPARE(QString::fromStdString(utterances[1].text), answer);
      QCOMPARE(utterances[1].role, std::string("assistant"));
    }
    QTRY_COMPARE(w->conversations()->count(), 1);
    // A traced request reached the timeline panel.
    QTRY_VERIFY(!w->timeline()->model().empty());
  }

  void memoryNoteIsALineUnderTheStats() {
    engram::ui::ChatView view;
    view.resize(600, 400);
    view.add_message(QStringLiteral("user"), QStringLiteral("a long question"));
    auto* answer = view.add_message(QStringLiteral("assistant"), QStringLiteral("an answer"));
    engram::ReplyStats stats;
    stats.generated_tokens = 3;
    stats.evicted_tokens = 412;
    stats.memory_note =
        "memory (streaming, budget 1024): 412 tokens moved out of attention; attention holds "
        "1024 of 5311 tokens; the text is kept whole";
    answer->set_stats(stats);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QCOMPARE(answer->memory_note_text(), QString::fromStdString(stats.memory_note));
    auto* footer = answer->findChild<QLabel*>(QStringLiteral("replyStats"));
    auto* memory = answer->findChild<QLabel*>(QStringLiteral("replyMemory"));
    QVERIFY(footer && memory && memory->isVisible());
    QVERIFY(memory->geometry().top() >= footer->geometry().bottom());
    QCOMPARE(memory->foregroundRole(), footer->foregroundRole());
    // A reply that moved nothing has no memory line.
    stats.memory_note.clear();
    answer->set_stats(stats);
    QVERIFY(answer->memory_note_text().isEmpty());
    QVERIFY(!memory->isVisible());
  }

  // What a turn does before its first token (an episode's build, a long prefill) is a line and a
  // bar in the waiting answer, gone as soon as its text starts.
  void progressWaitsInTheAnswerUntilItsText() {
    engram::ui::ChatView view;
    view.resize(600, 400);
    auto* answer = view.add_message(QStringLiteral("assistant"), QString());
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    auto* bar = answer->findChild<QProgressBar*>(QStringLiteral("replyProgress"));
    QVERIFY(bar && !bar->isVisible() && !answer->progress_visible());
    const QString what =
        QStringLiteral("Building episode 2 of 4 from the history: 12,288 of 20,017 tokens");
    answer->set_progress(what, 12288, 20017);
    QVERIFY(answer->progress_visible() && bar->isVisible());
    QCOMPARE(answer->progress_text(), what);
    QCOMPARE(bar->value(), 1000 * 12288 / 20017);
    answer->set_progress(QStringLiteral("Reading the conversation: 20,017 of 20,017 tokens"), 20017,
                         20017);
    QCOMPARE(bar->value(), bar->maximum());
    answer->append(QStringLiteral("The"));
    QVERIFY(!answer->progress_visible() && !bar->isVisible());
    // A stopped turn's stats take the line away too.
    auto* stopped = view.add_message(QStringLiteral("assistant"), QString());
    stopped->set_progress(what, 1, 2);
    engram::ReplyStats stats;
    stats.stop_reason = "cancelled";
    stopped->set_stats(stats);
    QVERIFY(!stopped->progress_visible());
    QVERIFY(stopped->stats_text().contains(QStringLiteral("stopped")));
  }

  void reopeningRestoresConversation() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->current_conversation() != 0, 10000);
    QTRY_COMPARE(w->chat()->count(), 2);
    QCOMPARE(w->chat()->at(0)->text(), QStringLiteral("Hello, who are you?"));
    QCOMPARE(w->chat()->at(1)->text(), first_answer_);
    QCOMPARE(w->conversations()->count(), 1);
    // The restored conversation goes on: a second turn is stored after the first.
    w->sendText(QStringLiteral("Tell me more."));
    wait_reply(*w);
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QCOMPARE(w->chat()->count(), 4);
  }

  void inspectorTotalsMatchEngine() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->current_conversation() != 0, 10000);
    w->sendText(QStringLiteral("And one more thing."));
    wait_reply(*w);
    // The snapshot after the reply carries the engine's own numbers (KvCache::bytes()).
    QTRY_VERIFY(w->inspector()->model()->snapshot().engine_cached_tokens > 0 && !w->busy());
    QTest::qWait(100);
    const engram::MemorySnapshot& s = w->inspector()->model()->snapshot();
    int64_t bytes = 0, tokens = 0, unit_bytes = 0;
    for (int l = 0; l < engram::kMemoryLocationCount; ++l) {
      bytes += s.bytes_by_location[l];
      tokens += s.tokens_by_location[l];
    }
    for (const auto& u : s.units)
      unit_bytes += u.bytes;
    QCOMPARE(bytes, s.engine_cache_bytes);
    QCOMPARE(unit_bytes, s.engine_cache_bytes);
    QCOMPARE(tokens, s.engine_cached_tokens);
    QCOMPARE(s.bytes_by_location[int(engram::MemoryLocation::kCpu)], s.engine_cache_bytes);
    // 6 utterances from three turns over three windows (earlier turns restored from the store).
    int utterances = 0;
    for (const auto& u : s.units)
      utterances += u.kind == "utterance" ? 1 : 0;
    QCOMPARE(utterances, 6);
    // The table shows the same rows.
    QCOMPARE(w->inspector()->model()->rowCount(), int(s.units.size()));
    QVERIFY(w->inspector()->totals_text().contains(QStringLiteral("CPU")));
  }

  void eventLoopStaysResponsiveDuringGeneration() {
    auto w = open_window();
    // Sampled, so the random fixture does not fall into an early end-of-text; long, so the
    // Markdown of the growing answer is re-rendered many times over a long text.
    engram::AssistantSampling s = w->sampling();
    s.temperature = 0.8;
    s.seed = 11;
    s.max_new_tokens = 1500;
    w->set_sampling(s);
    w->newConversation();
    QTRY_VERIFY(w->current_conversation() != 0);
    QElapsedTimer clock;
    qint64 last = 0, longest = 0;
    QTimer probe;
    connect(&probe, &QTimer::timeout, [&] {
      const qint64 now = clock.elapsed();
      longest = std::max(longest, now - last);
      last = now;
    });
    clock.start();
    probe.start(2);
    w->sendText(QStringLiteral("Write a long answer about memory."));
    wait_reply(*w);
    probe.stop();
    const qint64 total = clock.elapsed();
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QCOMPARE(w->chat()->count(), 2);
    const QString stats = w->chat()->last()->stats_text();
    qInfo() << "generation took" << total << "ms (" << stats << "); longest event-loop stall"
            << longest << "ms";
    QVERIFY2(
        total > 1000,
        qPrintable(
            QStringLiteral("generation too short to measure: %1 ms, %2").arg(total).arg(stats)));
    QVERIFY2(longest < 100, qPrintable(QStringLiteral("stall of %1 ms").arg(longest)));
  }

  void copyAndRegenerateActOnTheLastAnswer() {
    auto w = open_window();
    engram::AssistantSampling s = w->sampling();
    s.temperature = 0.9;  // sampled: a regenerated answer differs
    s.seed = 0;           // a fresh seed each request
    s.max_new_tokens = 24;
    w->set_sampling(s);
    w->newConversation();
    QTRY_VERIFY(w->current_conversation() != 0);
    const qint64 id = w->current_conversation();
    w->sendText(QStringLiteral("Say something."));
    wait_reply(*w);
    engram::ui::MessageBubble* answer = w->chat()->last();
    const QString before = answer->text();
    QVERIFY(!before.isEmpty());
    answer->findChild<QToolButton*>(QStringLiteral("copyButton"))->click();
    QCOMPARE(QApplication::clipboard()->text(), before);

    auto* regenerate = answer->findChild<QToolButton*>(QStringLiteral("regenerateButton"));
    QVERIFY(regenerate->isVisibleTo(answer));
    // Only the last answer offers it, and not while generating.
    QVERIFY(!w->chat()
                 ->at(0)
                 ->findChild<QToolButton*>(QStringLiteral("regenerateButton"))
                 ->isVisibleTo(w->chat()->at(0)));
    QSignalSpy done(w.get(), &MainWindow::replyDone);
    QString after;
    for (int attempt = 0; attempt < 3 && (after.isEmpty() || after == before); ++attempt) {
      w->chat()->last()->findChild<QToolButton*>(QStringLiteral("regenerateButton"))->click();
      QVERIFY(w->busy());
      QVERIFY(done.wait(kReplyTimeoutMs));
      after = w->chat()->last()->text();
      qInfo() << "regenerated" << attempt << after.left(30) << "before" << before.left(30);
    }
    QVERIFY2(after != before, "three regenerations gave the same answer");
    QCOMPARE(w->chat()->count(), 2);
    QVERIFY(w->chat()->last()->stats_text().contains(QStringLiteral("tokens/s")));
    engram::storage::Database db(dir_.filePath(QStringLiteral("profile")).toStdString(),
                                 engram::storage::Access::kReadOnly);
    const auto stored = engram::storage::ConversationRepository(db).utterances(id);
    QCOMPARE(stored.size(), size_t(2));
    QCOMPARE(QString::fromStdString(stored[1].text), after);
  }

  void inspectorUpdatesWhileGenerating() {
    auto w = open_window();
    engram::AssistantSampling s = w->sampling();
    s.temperature = 0.8;
    s.seed = 5;
    s.max_new_tokens = 800;
    w->set_sampling(s);
    w->newConversation();
    QTRY_VERIFY(w->current_conversation() != 0);
    // Each distinct token count of the open turn seen while the answer streams.
    QList<int64_t> seen;
    QTimer probe;
    connect(&probe, &QTimer::timeout, [&] {
      if (!w->busy()) return;
      for (const auto& u : w->inspector()->model()->snapshot().units) {
        if (u.state == "generating" && (seen.isEmpty() || seen.back() != u.tokens))
          seen << u.tokens;
      }
    });
    probe.start(5);
    w->sendText(QStringLiteral("Keep talking."));
    wait_reply(*w);
    probe.stop();
    QVERIFY2(seen.size() >= 3, qPrintable(QStringLiteral("%1 live updates").arg(seen.size())));
    QVERIFY(std::is_sorted(seen.begin(), seen.end()));
    QVERIFY(seen.back() > seen.front());
    // After the reply: no unit is still generating.
    QTRY_VERIFY(std::none_of(w->inspector()->model()->snapshot().units.begin(),
                             w->inspector()->model()->snapshot().units.end(),
                             [](const engram::MemoryUnit& u) { return u.state == "generating"; }));
  }

  void timelineKeepsEarlierRequestsToPickFrom() {
    auto w = open_window();
    w->newConversation();
    QTRY_VERIFY(w->current_conversation() != 0);
    w->sendText(QStringLiteral("One."));
    wait_reply(*w);
    w->sendText(QStringLiteral("Two."));
    wait_reply(*w);
    engram::ui::TimelinePanel* panel = w->timeline();
    QTRY_VERIFY(panel->model().requests().size() >= 2);
    const auto keys = panel->model().requests();
    // The panel follows the latest request...
    QTRY_COMPARE(panel->shown_request(), keys.back());
    // ...and shows an earlier one picked from the list, until the latest is picked again.
    QComboBox* list = panel->request_list();
    QCOMPARE(list->count(), int(keys.size()));
    const int earlier = list->count() - 2;
    list->setCurrentIndex(earlier);
    Q_EMIT list->activated(earlier);
    QCOMPARE(panel->shown_request(), keys[keys.size() - 2]);
    w->sendText(QStringLiteral("Three."));
    wait_reply(*w);
    QTRY_VERIFY(panel->model().requests().size() == keys.size() + 1);
    QCOMPARE(panel->shown_request(), keys[keys.size() - 2]);
    Q_EMIT list->activated(list->count() - 1);
    QCOMPARE(panel->shown_request(), panel->model().requests().back());
  }

  void badModelFolderIsAReadableErrorAndAppKeepsRunning() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->current_conversation() != 0, 10000);
    const int shown = w->chat()->count();
    QSignalSpy failed(w.get(), &MainWindow::modelFailed);
    engram::ModelLoadRequest r;
    r.dir = dir_.filePath(QStringLiteral("not-a-model")).toStdString();
    QDir().mkpath(QString::fromStdString(r.dir.string()));
    w->loadModel(r);
    QVERIFY(failed.wait(20000));
    QVERIFY(w->error_text().contains(QStringLiteral("config.json")));
    // The picker says which model still answers.
    QVERIFY2(w->model_bar()->status_text().contains(QStringLiteral("still using llama-gqa")),
             qPrintable(w->model_bar()->status_text()));
    QCOMPARE(w->chat()->count(), shown);
    // The previous model still answers.
    w->sendText(QStringLiteral("Still there?"));
    wait_reply(*w);
    QCOMPARE(w->chat()->count(), shown + 2);
  }

  void renameSearchAndDeleteConversations() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->conversations()->count() >= 2 && w->current_conversation() != 0,
                             10000);
    const int before = w->conversations()->count();
    auto has_name = [&](const QString& name) {
      for (int i = 0; i < w->conversations()->count(); ++i) {
        if (w->conversations()->name_at(i) == name) return true;
      }
      return false;
    };
    Q_EMIT w->conversations()->renameRequested(w->current_conversation(),
                                               QStringLiteral("Renamed one"));
    QTRY_VERIFY2(has_name(QStringLiteral("Renamed one")), qPrintable(w->error_text()));
    // Search by text finds it; the store answers through the worker.
    w->conversations()->findChild<QLineEdit*>()->setText(QStringLiteral("renamed"));
    QTRY_COMPARE(w->conversations()->count(), 1);
    w->conversations()->findChild<QLineEdit*>()->clear();
    QTRY_COMPARE(w->conversations()->count(), before);
    w->conversations()->set_confirm_deletes(false);
    w->conversations()->delete_current();
    QTRY_COMPARE(w->conversations()->count(), before - 1);
    QTRY_COMPARE(w->chat()->count(), 0);
  }
};

QTEST_MAIN(UiChatTest)
#include "test_ui_chat.moc"
