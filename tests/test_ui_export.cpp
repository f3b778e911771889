// File → Export/Import in the app (issue 19), with the fixture model on the CPU, through the
// window's real actions (only the modal file dialog is replaced): the open conversation and all
// conversations go to JSON and Markdown files; a JSON file comes back as a new conversation that
// the list shows and that answers a new message (its KV rebuilt from text); a damaged file opens
// a message box naming what is wrong and imports nothing.
#include <QComboBox>
#include <QFile>
#include <QLineEdit>
#include <QListWidget>
#include <QMessageBox>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QtTest>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/engine/conversation_store.h"
#include "storage/conversation_export.h"
#include "storage/database.h"
#include "ui/chat_view.h"
#include "ui/conversation_list.h"
#include "ui/main_window.h"
#include "ui/model_bar.h"
#include "ui_test_support.h"

using engram::ui::MainWindow;
using engram::ui::MainWindowOptions;

namespace {

constexpr int kReplyTimeoutMs = 120000;

QByteArray read_all(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return f.readAll();
}

QStringList listed_names(MainWindow& w) {
  QStringList names;
  for (int row = 0; row < w.conversations()->count(); ++row)
    names << w.conversations()->name_at(row);
  return names;
}

}  // namespace

class UiExportTest : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  QString chosen_;  // what the replaced file dialog answers
  QList<bool> asked_to_save_;

  std::unique_ptr<MainWindow> open_window(const QString& name) {
    MainWindowOptions o;
    o.profile_dir = dir_.filePath(name);
    o.settings_file = dir_.filePath(name + QStringLiteral(".ini"));
    auto w = std::make_unique<MainWindow>(o);
    w->set_file_chooser([this](bool save, const QString&) {
      asked_to_save_ << save;
      return chosen_;
    });
    engram::ui_test::show_and_wait_ready(*w);
    engram::ui_test::set_greedy(*w, 12);
    return w;
  }

  static void send_and_wait(MainWindow& w, const QString& text) {
    QSignalSpy done(&w, &MainWindow::replyDone);
    w.sendText(text);
    QVERIFY(done.wait(kReplyTimeoutMs));
    QVERIFY2(w.error_text().isEmpty(), qPrintable(w.error_text()));
  }

  // Triggers `action` with the dialog answering `file`; waits for the export to be written.
  void export_with(MainWindow& w, QAction* action, const QString& file, qint64 expected) {
    chosen_ = file;
    QSignalSpy exported(&w, &MainWindow::conversationsExported);
    QSignalSpy failed(&w, &MainWindow::fileActionFailed);
    action->trigger();
    QTRY_VERIFY_WITH_TIMEOUT(!exported.isEmpty() || !failed.isEmpty(), kReplyTimeoutMs);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    QCOMPARE(exported.at(0).at(0).toString(), file);
    QCOMPARE(exported.at(0).at(1).toLongLong(), expected);
    QCOMPARE(asked_to_save_.back(), true);
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    engram::ui_test::use_fixture_model();
  }

  void exportThenImportListsAConversationThatContinues() {
    auto w = open_window(QStringLiteral("home"));
    QVERIFY2(w->model_loaded(), qPrintable(w->error_text()));
    send_and_wait(*w, QStringLiteral("The key is under the blue pot."));
    QTRY_VERIFY(w->current_conversation() != 0);
    QTRY_COMPARE(w->conversations()->count(), 1);
    const QString title = w->conversations()->name_at(0);
    w->newConversation();
    send_and_wait(*w, QStringLiteral("Second chat."));
    QTRY_COMPARE(w->conversations()->count(), 2);
    // Back to the first one: "Export conversation" writes the open one.
    QSignalSpy shown(w.get(), &MainWindow::conversationShown);
    qint64 first = 0;
    for (int row = 0; row < 2; ++row) {
      if (w->conversations()->name_at(row) == title)
        first = w->conversations()->list()->item(row)->data(Qt::UserRole).toLongLong();
    }
    Q_EMIT w->conversations()->openRequested(first);
    QVERIFY(shown.wait(kReplyTimeoutMs));
    QCOMPARE(w->current_conversation(), first);

    const QString one = dir_.filePath(QStringLiteral("one.json"));
    export_with(*w, w->export_conversation_action(), one, 1);
    const auto document = nlohmann::json::parse(read_all(one).toStdString());
    QCOMPARE(document.at("format"), "engram-conversations");
    QCOMPARE(document.at("conversations").size(), 1u);
    const auto& exported = document.at("conversations").at(0);
    QCOMPARE(QString::fromStdString(exported.at("title")), title);
    QCOMPARE(exported.at("messages").size(), 2u);
    QCOMPARE(exported.at("messages").at(0).at("text"), "The key is under the blue pot.");
    QCOMPARE(exported.at("messages").at(1).at("role"), "assistant");

    const QString all = dir_.filePath(QStringLiteral("all.md"));
    export_with(*w, w->export_all_action(), all, 2);
    const QString markdown = QString::fromUtf8(read_all(all));
    QVERIFY(markdown.startsWith(QStringLiteral("# ") + title));
    QCOMPARE(markdown.count(QStringLiteral("**You**")), 2);
    QCOMPARE(markdown.count(QStringLiteral("**Engram**")), 2);
    QVERIFY(markdown.contains(QStringLiteral("Second chat.")));

    // Import the first conversation back: a third entry, renamed since the title is taken.
    chosen_ = one;
    QSignalSpy imported(w.get(), &MainWindow::conversationsImported);
    QSignalSpy listed(w.get(), &MainWindow::conversationsRefreshed);
    w->import_action()->trigger();
    QVERIFY(imported.wait(kReplyTimeoutMs));
    QCOMPARE(asked_to_save_.back(), false);
    QCOMPARE(imported.at(0).at(1).toLongLong(), 1);
    QTRY_COMPARE(w->conversations()->count(), 3);
    const QString copy = title + QStringLiteral(" (imported)");
    QVERIFY2(listed_names(*w).contains(copy), qPrintable(listed_names(*w).join(", ")));

    // It opens with its text and answers: no KV came with it, so the engine rebuilds it.
    qint64 copy_id = 0;
    for (int row = 0; row < 3; ++row) {
      if (w->conversations()->name_at(row) == copy)
        copy_id = w->conversations()->list()->item(row)->data(Qt::UserRole).toLongLong();
    }
    Q_EMIT w->conversations()->openRequested(copy_id);
    QTRY_COMPARE_WITH_TIMEOUT(w->current_conversation(), copy_id, kReplyTimeoutMs);
    QTRY_COMPARE(w->chat()->count(), 2);
    QCOMPARE(w->chat()->at(0)->text(), QStringLiteral("The key is under the blue pot."));
    send_and_wait(*w, QStringLiteral("Where is the key?"));
    QCOMPARE(w->chat()->count(), 4);
    QVERIFY(!w->chat()->at(3)->text().isEmpty());
    QCOMPARE(w->current_conversation(), copy_id);
  }

  // A long chat of four topics under `policy` (budget 256 for epicache), imported and opened in
  // `w`; returns its id. `prepared` and `status` are listening before it opens.
  qint64 import_long_chat(MainWindow& w, const std::string& policy) {
    const QString file = dir_.filePath(QString::fromStdString("long-" + policy + ".json"));
    {
      engram::storage::ConversationTranscript t;
      t.conversation.name = "A long chat";
      t.conversation.memory_policy = policy;
      t.conversation.kv_budget = policy == "epicache" ? 256 : 0;
      const char* topics[] = {"the garden and its roses", "the old bicycle in the shed",
                              "the chess club on Tuesdays", "the recipe for plum cake"};
      for (int i = 0; i < 160; ++i) {
        const std::string text = "Note " + std::to_string(i) + " is about " + topics[(i / 8) % 4] +
                                 ", which came up again today.";
        t.utterances.push_back({0, i, i % 2 ? "assistant" : "user", text, 0, 0, 0});
      }
      QFile out(file);
      if (!out.open(QIODevice::WriteOnly)) return 0;
      out.write(QByteArray::fromStdString(engram::storage::conversations_to_json({t})));
    }
    chosen_ = file;
    QSignalSpy imported(&w, &MainWindow::conversationsImported);
    w.import_action()->trigger();
    if (!imported.wait(kReplyTimeoutMs) ||
        !QTest::qWaitFor([&] { return w.conversations()->count() == 1; }, kReplyTimeoutMs))
      return 0;
    const qint64 id = w.conversations()->list()->item(0)->data(Qt::UserRole).toLongLong();
    Q_EMIT w.conversations()->openRequested(id);
    return id;
  }

  static bool said(const QSignalSpy& status, const QString& what) {
    for (const QList<QVariant>& m : status)
      if (m.at(0).toString().startsWith(what)) return true;
    return false;
  }

  // EpiCache caches in the store of profile `name` for conversation `id`.
  int64_t stored_episode_caches(const QString& name, qint64 id) {
    engram::storage::Database db(dir_.filePath(name).toStdString(),
                                 engram::storage::Access::kReadOnly);
    const auto stored = engram::ConversationStore(db).stored_kv(id);
    return stored ? stored->episode_caches : int64_t{0};
  }

  // A long conversation imported under epicache with a small budget, opened: while nobody waits
  // the worker indexes and clusters its history and builds every episode a block at a time, the
  // status bar saying so, and saves them (issue 15), so the store holds every episode's cache
  // before the first question; the question is answered.
  void aLongImportedChatPreparesItsEpisodesBetweenTurns() {
    auto w = open_window(QStringLiteral("episodes"));
    QVERIFY2(w->model_loaded(), qPrintable(w->error_text()));
    QSignalSpy prepared(w.get(), &MainWindow::memoryPrepared);
    QSignalSpy status(w->statusBar(), &QStatusBar::messageChanged);
    const qint64 id = import_long_chat(*w, "epicache");
    QVERIFY(id != 0);
    QTRY_COMPARE_WITH_TIMEOUT(w->current_conversation(), id, kReplyTimeoutMs);
    QVERIFY(!prepared.isEmpty() || prepared.wait(kReplyTimeoutMs));
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QVERIFY(said(status, QStringLiteral("Indexing the conversation: ")));
    QVERIFY(said(status, QStringLiteral("Preparing episode ")));
    // In the store before any question: the episodes, and a cache for each of them.
    const int64_t caches = stored_episode_caches(QStringLiteral("episodes"), id);
    QVERIFY2(caches >= 2, qPrintable(QString("%1 episode caches").arg(caches)));
    send_and_wait(*w, QStringLiteral("What did we say about the plum cake?"));
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QVERIFY(!w->chat()->at(w->chat()->count() - 1)->text().isEmpty());
    QCOMPARE(stored_episode_caches(QStringLiteral("episodes"), id), caches);
  }

  // The same chat under full KV: nothing to prepare. Moved to EpiCache with a small budget from the
  // model bar, the worker indexes, clusters and builds its episodes at once, not at the next
  // question.
  void aLongChatMovedToEpiCacheIsPreparedAtOnce() {
    auto w = open_window(QStringLiteral("moved"));
    QVERIFY2(w->model_loaded(), qPrintable(w->error_text()));
    QSignalSpy prepared(w.get(), &MainWindow::memoryPrepared);
    QSignalSpy status(w->statusBar(), &QStatusBar::messageChanged);
    const qint64 id = import_long_chat(*w, "full");
    QVERIFY(id != 0);
    QTRY_COMPARE_WITH_TIMEOUT(w->current_conversation(), id, kReplyTimeoutMs);
    engram::ui::ModelBar* bar = w->model_bar();
    QTRY_COMPARE(bar->memory_policy().spec, std::string("full"));
    QVERIFY(!prepared.wait(1000));  // full KV keeps no episodes
    QVERIFY(!said(status, QStringLiteral("Indexing the conversation: ")));
    bar->policy_combo()->setCurrentIndex(bar->policy_combo()->findText(QStringLiteral("epicache")));
    bar->budget_spin()->setValue(256);
    QTRY_COMPARE(bar->memory_policy().kv_budget, int64_t{256});
    QVERIFY(!prepared.isEmpty() || prepared.wait(kReplyTimeoutMs));
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QVERIFY(said(status, QStringLiteral("Indexing the conversation: ")));
    QTRY_VERIFY_WITH_TIMEOUT(stored_episode_caches(QStringLiteral("moved"), id) >= 2,
                             kReplyTimeoutMs);
  }

  void damagedFileShowsWhyAndImportsNothing() {
    auto w = open_window(QStringLiteral("damaged"));
    QVERIFY2(w->model_loaded(), qPrintable(w->error_text()));
    send_and_wait(*w, QStringLiteral("Hello."));
    QTRY_COMPARE(w->conversations()->count(), 1);
    const QString bad = dir_.filePath(QStringLiteral("bad.json"));
    {
      QFile f(bad);
      QVERIFY(f.open(QIODevice::WriteOnly));
      // A valid first conversation, then a message whose role is a number.
      f.write(R"({"format": "engram-conversations", "version": 1, "conversations": [
        {"title": "ok", "created_ms": 1, "updated_ms": 1, "messages": []},
        {"title": "bad", "created_ms": 1, "updated_ms": 1, "messages": [
          {"role": 3, "text": "x", "time_ms": 1}]}]})");
    }
    chosen_ = bad;
    QSignalSpy failed(w.get(), &MainWindow::fileActionFailed);
    w->import_action()->trigger();
    QVERIFY(failed.wait(kReplyTimeoutMs));
    const QString message = failed.at(0).at(0).toString();
    QVERIFY2(message.contains(QStringLiteral("bad.json at /conversations/1/messages/0/role")),
             qPrintable(message));
    QVERIFY2(message.contains(QStringLiteral("expected a string, found an integer")),
             qPrintable(message));
    auto* box = w->findChild<QMessageBox*>(QStringLiteral("fileErrorBox"));
    QVERIFY(box);
    QTRY_VERIFY(box->isVisible());
    QCOMPARE(box->text(), message);
    box->accept();
    // Nothing imported: the list, refreshed on request, still holds the one conversation.
    QSignalSpy listed(w.get(), &MainWindow::conversationsRefreshed);
    w->conversations()->findChild<QLineEdit*>()->setText(QStringLiteral("o"));
    w->conversations()->findChild<QLineEdit*>()->clear();
    QVERIFY(listed.wait(kReplyTimeoutMs));
    QTRY_COMPARE(w->conversations()->count(), 1);

    // Cancelling the dialog does nothing.
    chosen_.clear();
    QSignalSpy exported(w.get(), &MainWindow::conversationsExported);
    w->export_all_action()->trigger();
    QTest::qWait(200);
    QVERIFY(exported.isEmpty());
  }
};

QTEST_MAIN(UiExportTest)
#include "test_ui_export.moc"
