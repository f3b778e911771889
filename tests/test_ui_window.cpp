// The window around the chat, with the fixture model on the CPU: the keys (Enter sends,
// Shift+Enter new line, Esc stops, Ctrl+N new conversation), settings that come back in a new
// window (model, device, dtype, sampling, geometry, dock layout, a panel added late), the system
// palette (light and dark), the delete confirmation, Markdown answers (a streamed one ends as one
// setMarkdown of its text, each streaming render parsing only its tail), and failures shown as
// readable messages while the app goes on and keeps every conversation: a damaged conversation
// in the store, a turn the engine refuses, out of memory; the memory policy chosen in the model
// bar (the default one answers past the model's positions, with a memory line under the answer;
// each conversation keeps its own).
#include <QAction>
#include <QClipboard>
#include <QComboBox>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenu>
#include <QMessageBox>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStyleFactory>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextList>
#include <QToolButton>
#include <QtTest>

#include <algorithm>
#include <fstream>
#include <memory>
#include <new>
#include <stdexcept>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "store_file_damage.h"
#include "ui/chat_view.h"
#include "ui/conversation_list.h"
#include "ui/engine_worker.h"
#include "ui/main_window.h"
#include "ui/memory_inspector.h"
#include "ui/message_input.h"
#include "ui/model_bar.h"
#include "ui/timeline_panel.h"
#include "ui_test_support.h"

using engram::ui::MainWindow;
using engram::ui::MainWindowOptions;
namespace fs = std::filesystem;

namespace {

using engram::test::overflow_pages;
using engram::test::overwrite;

using engram::ui_test::kModelTimeoutMs;
constexpr int kReplyTimeoutMs = 120000;

bool is_dark(const QColor& c) {
  return c.lightness() < 128;
}

}  // namespace

class UiWindowTest : public QObject {
  Q_OBJECT

 private:
  QString profile(const QString& name) const { return dir_.filePath(name); }

  std::unique_ptr<MainWindow> open_window(const QString& name, bool greedy = true) {
    MainWindowOptions o;
    o.profile_dir = profile(name);
    o.settings_file = profile(name + QStringLiteral(".ini"));
    auto w = std::make_unique<MainWindow>(o);
    engram::ui_test::show_and_wait_ready(*w);
    if (greedy) {
      engram::ui_test::set_greedy(*w, 24);
    }
    return w;
  }

  // Picks `policy` (and a budget) in the model bar's widgets, as a person would.
  static void choose_policy(MainWindow& w, const QString& policy, int budget = -1) {
    QComboBox* combo = w.model_bar()->policy_combo();
    const int index = combo->findText(policy);
    QVERIFY2(index >= 0, qPrintable(policy));
    combo->setCurrentIndex(index);
    if (budget >= 0) w.model_bar()->budget_spin()->setValue(budget);
    QCOMPARE(w.model_bar()->memory_policy().spec, policy.toStdString());
  }

  // Past the fixture's 2048 positions (about 2,400 tokens).
  static QString longer_than_the_positions() {
    QString text;
    for (int i = 0; i < 1200; ++i)
      text += QStringLiteral("memory cache ");
    return text.trimmed();
  }

  static void activate(MainWindow& w) {
    w.activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(&w));
  }

  QTemporaryDir dir_;

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    qputenv("ENGRAM_MODEL_DIR", ENGRAM_TEST_DATA "/models/llama-gqa");
  }

  void enterSendsShiftEnterBreaksEscStopsCtrlNStartsAnew() {
    auto w = open_window(QStringLiteral("keys"), false);
    QVERIFY2(w->model_loaded(), qPrintable(w->error_text()));
    engram::AssistantSampling s;
    s.temperature = 0.8;
    s.seed = 3;
    s.max_new_tokens = 2000;  // long enough that only Esc ends it
    w->set_sampling(s);
    activate(*w);
    engram::ui::MessageInput* input = w->input();
    input->setFocus();
    QTest::keyClicks(input, QStringLiteral("first line"));
    QTest::keyClick(input, Qt::Key_Return, Qt::ShiftModifier);
    QTest::keyClicks(input, QStringLiteral("second line"));
    QCOMPARE(input->toPlainText(), QStringLiteral("first line\nsecond line"));
    QVERIFY(!w->busy());
    QCOMPARE(w->chat()->count(), 0);

    QSignalSpy done(w.get(), &MainWindow::replyDone);
    QTest::keyClick(input, Qt::Key_Return);
    QVERIFY(w->busy());
    QVERIFY(input->toPlainText().isEmpty());
    QCOMPARE(w->chat()->count(), 2);
    QCOMPARE(w->chat()->at(0)->text(), QStringLiteral("first line\nsecond line"));
    // Esc while the answer streams: it stops after a few tokens, and what came is kept.
    QTRY_VERIFY_WITH_TIMEOUT(!w->chat()->at(1)->text().isEmpty(), kReplyTimeoutMs);
    QTest::keyClick(input, Qt::Key_Escape);
    QVERIFY(done.wait(kReplyTimeoutMs));
    QVERIFY(!w->busy());
    QVERIFY2(w->chat()->at(1)->stats_text().contains(QStringLiteral("stopped")),
             qPrintable(w->chat()->at(1)->stats_text()));
    const QString partial = w->chat()->at(1)->text();
    QVERIFY(!partial.isEmpty());
    QTRY_VERIFY(w->current_conversation() != 0);  // the send created it
    const qint64 first = w->current_conversation();

    // Ctrl+N: a new, empty conversation; the stopped one is in the list and in the store.
    QTest::keyClick(input, Qt::Key_N, Qt::ControlModifier);
    QTRY_VERIFY(w->current_conversation() != 0 && w->current_conversation() != first);
    QCOMPARE(w->chat()->count(), 0);
    QTRY_COMPARE(w->conversations()->count(), 2);
    w.reset();
    engram::storage::Database db(profile(QStringLiteral("keys")).toStdString(),
                                 engram::storage::Access::kReadOnly);
    const auto stored = engram::storage::ConversationRepository(db).utterances(first);
    QCOMPARE(stored.size(), size_t(2));
    QCOMPARE(QString::fromStdString(stored[1].text), partial);
  }

  void stopButtonStopsGeneration() {
    auto w = open_window(QStringLiteral("keys"), false);
    engram::AssistantSampling s;
    s.temperature = 0.8;
    s.seed = 4;
    s.max_new_tokens = 2000;
    w->set_sampling(s);
    w->newConversation();
    QTRY_VERIFY(w->current_conversation() != 0);
    QSignalSpy done(w.get(), &MainWindow::replyDone);
    w->sendText(QStringLiteral("A long answer, please."));
    QCOMPARE(w->send_button()->text(), QStringLiteral("Stop"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->chat()->at(1)->text().isEmpty(), kReplyTimeoutMs);
    QTest::mouseClick(w->send_button(), Qt::LeftButton);
    QVERIFY(done.wait(kReplyTimeoutMs));
    QVERIFY(w->chat()->at(1)->stats_text().contains(QStringLiteral("stopped")));
    QCOMPARE(w->send_button()->text(), QStringLiteral("Send"));
  }

  void newConversationAtStartIsNotOvertakenByTheReopen() {
    const QString name = QStringLiteral("race");
    qint64 old = 0;
    {
      auto w = open_window(name);
      w->sendText(QStringLiteral("An old conversation"));
      QTRY_VERIFY_WITH_TIMEOUT(!w->busy() && w->current_conversation() != 0, kReplyTimeoutMs);
      old = w->current_conversation();
    }
    // Ctrl+N before the list has come: the last conversation is not reopened over the new one.
    MainWindowOptions o;
    o.profile_dir = profile(name);
    o.settings_file = profile(name + QStringLiteral(".ini"));
    auto w = std::make_unique<MainWindow>(o);
    QSignalSpy listed(w.get(), &MainWindow::conversationsRefreshed);
    w->show();
    w->newConversation();
    QTRY_VERIFY_WITH_TIMEOUT(w->model_loaded() && listed.size() >= 2, kModelTimeoutMs);
    QTest::qWait(200);
    QVERIFY(w->current_conversation() != 0);
    QVERIFY(w->current_conversation() != old);
    QCOMPARE(w->chat()->count(), 0);

    // A message sent in the same moment as New goes to the new conversation and stays on screen.
    Q_EMIT w->conversations()->openRequested(old);
    QTRY_COMPARE(w->current_conversation(), old);
    QTRY_COMPARE(w->chat()->count(), 2);
    w->newConversation();
    w->sendText(QStringLiteral("Right after New"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    QCOMPARE(w->chat()->count(), 2);
    QCOMPARE(w->chat()->at(0)->text(), QStringLiteral("Right after New"));
    QVERIFY(!w->chat()->at(1)->text().isEmpty());
    QVERIFY(w->current_conversation() != old);
  }

  void aChosenHuggingFaceFolderLoadsInTheBackgroundWithProgress() {
    // The person's own folder (a copy of the fixture under another name).
    const QString folder = profile(QStringLiteral("picked-model"));
    QVERIFY(QDir().mkpath(folder));
    for (const char* f :
         {"config.json", "generation_config.json", "model.safetensors", "tokenizer.model"}) {
      QVERIFY(QFile::copy(QStringLiteral(ENGRAM_TEST_DATA "/models/llama-gqa/") + f,
                          folder + QLatin1Char('/') + f));
    }
    auto w = open_window(QStringLiteral("picker"));
    QVERIFY(w->model_loaded());
    QProgressBar* bar = w->model_bar()->progress_bar();
    QVERIFY(!bar->isVisible());
    w->model_bar()->set_choice(folder, QStringLiteral("cpu"), QStringLiteral("auto"));
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    QElapsedTimer stall;
    qint64 longest = 0;
    QTimer probe;
    stall.start();
    connect(&probe, &QTimer::timeout, [&] { longest = std::max(longest, stall.restart()); });
    probe.start(2);
    QTest::mouseClick(w->findChild<QPushButton*>(QStringLiteral("loadModelButton")),
                      Qt::LeftButton);
    // In the background: the window is still answering, with a busy bar.
    QVERIFY(!w->model_loaded());
    QVERIFY(bar->isVisible());
    QVERIFY(ready.wait(kModelTimeoutMs));
    probe.stop();
    QVERIFY2(longest < 100,
             qPrintable(QStringLiteral("stall of %1 ms while loading").arg(longest)));
    QVERIFY(!bar->isVisible());
    // The worker reported the bytes it read: the bar switched from busy to a 0..1000 scale.
    QCOMPARE(bar->maximum(), 1000);
    QCOMPARE(bar->value(), 1000);
    QVERIFY2(w->model_bar()->status_text().startsWith(QStringLiteral("picked-model")),
             qPrintable(w->model_bar()->status_text()));
    QVERIFY(w->model_bar()->recent_dirs().contains(folder));
    w->sendText(QStringLiteral("Hello from my own model"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QCOMPARE(w->chat()->count(), 2);
  }

  void settingsComeBackInANewWindow() {
    const QString name = QStringLiteral("settings");
    {
      auto w = open_window(name);
      QVERIFY(w->model_loaded());
      engram::AssistantSampling s;
      s.temperature = 0.35;
      s.top_k = 7;
      s.top_p = 0.8;
      s.repetition_penalty = 1.3;
      s.max_new_tokens = 99;
      s.seed = 42;
      w->set_sampling(s);
      // Load explicitly on the CPU in f32: that choice is remembered once it loaded.
      w->model_bar()->set_choice(QString(), QStringLiteral("cpu"), QStringLiteral("f32"));
      QSignalSpy ready(w.get(), &MainWindow::modelReady);
      w->loadModel(w->model_bar()->request());
      QVERIFY(ready.wait(kModelTimeoutMs));
      // A folder that fails to load is not remembered.
      QSignalSpy failed(w.get(), &MainWindow::modelFailed);
      engram::ModelLoadRequest bad;
      bad.dir = profile(QStringLiteral("no-model-here")).toStdString();
      bad.device = "cpu";
      bad.dtype = "bf16";
      w->loadModel(bad);
      QVERIFY(failed.wait(20000));
      w->resize(1111, 777);
      w->panel(QStringLiteral("timeline"))->hide();
      w->close();
    }
    auto w = open_window(name, false);
    QVERIFY(w->model_loaded());
    const engram::AssistantSampling s = w->sampling();
    QCOMPARE(s.temperature, 0.35);
    QCOMPARE(s.top_k, int64_t(7));
    QCOMPARE(s.top_p, 0.8);
    QCOMPARE(s.repetition_penalty, 1.3);
    QCOMPARE(s.max_new_tokens, int64_t(99));
    QCOMPARE(s.seed, uint64_t(42));
    QCOMPARE(w->model_bar()->device(), QStringLiteral("cpu"));
    QCOMPARE(w->model_bar()->dtype(), QStringLiteral("f32"));
    QVERIFY(w->model_bar()->dir().isEmpty());  // the bundled model, not the failed folder
    QVERIFY(w->model_bar()->status_text().contains(QStringLiteral("f32")));
    QCOMPARE(w->size(), QSize(1111, 777));
    QVERIFY(!w->panel(QStringLiteral("timeline"))->isVisible());
    QVERIFY(w->panel(QStringLiteral("memory"))->isVisible());
  }

  void aPanelAddedLaterJoinsViewMenuAndSavedLayout() {
    const QString name = QStringLiteral("panels");
    {
      auto w = open_window(name);
      auto* episodes = new QLabel(QStringLiteral("late"));
      QDockWidget* dock = w->add_panel(QStringLiteral("late"), QStringLiteral("Late"), episodes,
                                       Qt::LeftDockWidgetArea);
      QVERIFY(dock->isVisible());
      QAction* toggle = nullptr;
      for (QAction* a : w->panels_menu()->actions())
        toggle = a->text() == QStringLiteral("Late") ? a : toggle;
      QVERIFY(toggle);
      QCOMPARE(w->panels_menu()->actions().size(),
               5);  // memory, timeline, importance, episodes, late
      toggle->trigger();
      QVERIFY(!dock->isVisible());
      toggle->trigger();
      QVERIFY(dock->isVisible());
      w->addDockWidget(Qt::RightDockWidgetArea, dock);
      QCOMPARE(w->dockWidgetArea(dock), Qt::RightDockWidgetArea);
      w->close();
    }
    auto w = open_window(name);
    QDockWidget* dock = w->add_panel(QStringLiteral("late"), QStringLiteral("Late"),
                                     new QLabel(QStringLiteral("late")), Qt::LeftDockWidgetArea);
    QCOMPARE(w->dockWidgetArea(dock), Qt::RightDockWidgetArea);
    QVERIFY(dock->isVisible());
  }

  void followsLightAndDarkPalettes() {
    auto w = open_window(QStringLiteral("palette"));
    w->sendText(QStringLiteral("Hi"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    w->showError(QStringLiteral("A message to read"));
    const QPalette light = QApplication::palette();
    QPalette dark = QStyleFactory::create(QStringLiteral("Fusion"))->standardPalette();
    dark.setColor(QPalette::Window, QColor(0x2b, 0x2b, 0x2b));
    dark.setColor(QPalette::WindowText, QColor(0xee, 0xee, 0xee));
    dark.setColor(QPalette::Base, QColor(0x1e, 0x1e, 0x1e));
    dark.setColor(QPalette::AlternateBase, QColor(0x33, 0x33, 0x33));
    dark.setColor(QPalette::Text, QColor(0xee, 0xee, 0xee));
    dark.setColor(QPalette::PlaceholderText, QColor(0x99, 0x99, 0x99));
    auto check = [&](bool want_dark) {
      engram::ui::MessageBubble* answer = w->chat()->at(1);
      QCOMPARE(is_dark(answer->palette().color(answer->backgroundRole())), want_dark);
      const QImage bubble = answer->grab().toImage();
      QCOMPARE(is_dark(bubble.pixelColor(bubble.width() / 2, 3)), want_dark);
      // The text contrasts with the bubble: in a dark palette its brightest pixels are light, in
      // a light one its darkest are dark, for answers (Markdown) and the person's own words.
      for (engram::ui::MessageBubble* b : {answer, w->chat()->at(0)}) {
        auto* body = b->findChild<QTextBrowser*>(QStringLiteral("messageBody"));
        const QImage text = b->grab(body->geometry()).toImage();
        int lightest = 0, darkest = 255;
        for (int y = 0; y < text.height(); ++y) {
          for (int x = 0; x < text.width(); ++x) {
            const int l = text.pixelColor(x, y).lightness();
            lightest = std::max(lightest, l);
            darkest = std::min(darkest, l);
          }
        }
        if (want_dark) {
          QVERIFY2(lightest > 170,
                   qPrintable(QStringLiteral("lightest text pixel %1").arg(lightest)));
        } else {
          QVERIFY2(darkest < 90, qPrintable(QStringLiteral("darkest text pixel %1").arg(darkest)));
        }
      }
      QImage timeline(400, 120, QImage::Format_ARGB32);
      QPainter p(&timeline);
      w->timeline()->view()->render_to(p, timeline.size());
      p.end();
      QCOMPARE(is_dark(timeline.pixelColor(2, 60)), want_dark);
      // The error banner stays readable: its background follows, its text contrasts.
      const QImage banner = w->error_banner()->grab().toImage();
      QCOMPARE(is_dark(banner.pixelColor(banner.width() - 4, banner.height() / 2)), want_dark);
    };
    check(false);
    QApplication::setPalette(dark);
    QTRY_VERIFY(is_dark(w->palette().color(QPalette::Window)));
    check(true);
    QApplication::setPalette(light);
    QTRY_VERIFY(!is_dark(w->palette().color(QPalette::Window)));
    check(false);
  }

  void deleteAsksFirstAndCancelKeepsTheConversation() {
    auto w = open_window(QStringLiteral("delete"));
    w->sendText(QStringLiteral("Keep me"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    QTRY_COMPARE(w->conversations()->count(), 1);
    auto answer = [](QMessageBox::StandardButton button, QString* asked) {
      QTimer::singleShot(0, [button, asked] {
        auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
        if (!box) return;
        *asked = box->text();
        box->button(button)->click();
      });
    };
    QString asked;
    answer(QMessageBox::Cancel, &asked);
    w->conversations()->delete_current();
    QVERIFY2(asked.contains(QStringLiteral("Keep me")), qPrintable(asked));
    QTest::qWait(300);
    QCOMPARE(w->conversations()->count(), 1);
    QCOMPARE(w->chat()->count(), 2);
    asked.clear();
    answer(QMessageBox::Yes, &asked);
    w->conversations()->delete_current();
    QVERIFY(!asked.isEmpty());
    QTRY_COMPARE(w->conversations()->count(), 0);
    QTRY_COMPARE(w->chat()->count(), 0);
  }

  void answersAreMarkdownUserTextIsNot() {
    engram::ui::ChatView view;
    view.resize(600, 400);
    const QString md = QStringLiteral("**bold** and `code`\n\n- item one\n- item two\n");
    auto* answer = view.add_message(QStringLiteral("assistant"), md);
    auto* mine = view.add_message(QStringLiteral("user"), md);
    view.show();
    QTextDocument* doc =
        answer->findChild<QTextBrowser*>(QStringLiteral("messageBody"))->document();
    QVERIFY(!doc->toPlainText().contains(QStringLiteral("**")));
    bool bold = false, list = false, mono = false;
    for (QTextBlock b = doc->begin(); b.isValid(); b = b.next()) {
      list = list || b.textList() != nullptr;
      for (auto it = b.begin(); !it.atEnd(); ++it) {
        const QTextCharFormat f = it.fragment().charFormat();
        bold = bold ||
               (it.fragment().text() == QStringLiteral("bold") && f.fontWeight() >= QFont::Bold);
        mono = mono || (it.fragment().text() == QStringLiteral("code") && f.fontFixedPitch());
      }
    }
    QVERIFY(bold);
    QVERIFY(list);
    QVERIFY(mono);
    QTextDocument* plain =
        mine->findChild<QTextBrowser*>(QStringLiteral("messageBody"))->document();
    QCOMPARE(plain->toPlainText(), md);
    // Streaming appends re-render the Markdown (at most every 50 ms).
    auto* streaming = view.add_message(QStringLiteral("assistant"), QString());
    streaming->append(QStringLiteral("**gro"));
    streaming->append(QStringLiteral("wing**"));
    QTRY_VERIFY(streaming->findChild<QTextBrowser*>()->document()->toPlainText() ==
                QStringLiteral("growing"));
  }

  void bubblesFitTheirTextAtEveryWidth() {
    engram::ui::ChatView view;
    view.resize(700, 500);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    auto* mine = view.add_message(QStringLiteral("user"),
                                  QStringLiteral("Write a very long answer about memory."));
    auto* body = mine->findChild<QTextBrowser*>(QStringLiteral("messageBody"));
    const int line = body->fontMetrics().lineSpacing();
    // One line of text at this width: no empty lines under it.
    QTRY_VERIFY2(
        body->height() < 2 * line + 12,
        qPrintable(QStringLiteral("%1 px for one line of %2").arg(body->height()).arg(line)));
    // Narrow: it wraps and grows; wide again: it shrinks back.
    view.resize(200, 500);
    QTRY_VERIFY(body->height() >= 2 * line);
    view.resize(700, 500);
    QTRY_VERIFY(body->height() < 2 * line + 12);
  }

  // A streamed answer rendered after every few characters (fenced code with a blank line, lists
  // with blank lines between items, headings, tables, a long one-line paragraph) ends as exactly
  // one setMarkdown of its text; while it streams, a render parses only what follows the last cut
  // (a whole-text render would parse all of it), and the body is as tall as the finished one.
  void streamedAnswerEndsAsOneSetMarkdownAndRendersOnlyItsTail() {
    engram::ui::ChatView view;
    view.resize(600, 500);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    const QString section = QStringLiteral(
        "## Step %1\n\n"
        "Some **bold** text, `code` and a paragraph long enough to wrap over a line or two at "
        "this width, about step %1.\n\n"
        "- first item\n\n- second item\n\n  with a second paragraph\n\n"
        "```cpp\nint step = %1;\n\nreturn step;\n```\n\n"
        "| Name | Value |\n|------|-------|\n| step | %1 |\n\n"
        "1. one\n2. two\n\n");
    QString md = QStringLiteral("# An answer\n\n");
    for (int i = 1; md.size() < 6000; ++i)
      md += section.arg(i);
    const QStringList words = {QStringLiteral("memory"),  QStringLiteral("attention"),
                               QStringLiteral("tokens"),  QStringLiteral("cache"),
                               QStringLiteral("ünïcödé"), QStringLiteral("ключ")};
    for (int i = 0; i < 500; ++i)
      md += words[(i * 5 + i / 4) % words.size()] + QLatin1Char(' ');
    md += QStringLiteral("\n\nThe end.");
    auto* answer = view.add_message(QStringLiteral("assistant"), QString());
    auto* body = answer->findChild<QTextBrowser*>(QStringLiteral("messageBody"));
    QTRY_VERIFY(body->viewport()->width() > 400);
    qsizetype most = 0;
    for (qsizetype i = 0; i < md.size(); i += 9) {
      answer->append(md.mid(i, 9));
      answer->render_pending();
      if (i > 2000) most = std::max(most, answer->last_render_parsed());
      if (i % 450 == 0) QCoreApplication::processEvents();  // layout, scroll bar, resizes
    }
    QVERIFY2(most < 1200, qPrintable(QStringLiteral("a streaming render parsed %1 of %2 characters")
                                         .arg(most)
                                         .arg(md.size())));
    const int streamed_height =
        body->minimumHeight();  // fit_height's (the layout applies it later)
    // What replyFinished does: the final text, then the stats.
    answer->set_text(md);
    engram::ReplyStats stats;
    stats.generated_tokens = 1;
    answer->set_stats(stats);
    QCOMPARE(answer->last_render_parsed(), md.size());
    QTextDocument fresh;
    fresh.setDefaultFont(body->document()->defaultFont());
    fresh.setMarkdown(md);
    QCOMPARE(body->document()->toHtml(), fresh.toHtml());
    QCOMPARE(body->document()->toMarkdown(), fresh.toMarkdown());
    QVERIFY2(qAbs(body->minimumHeight() - streamed_height) <= 2,
             qPrintable(QStringLiteral("streamed %1 px, finished %2 px")
                            .arg(streamed_height)
                            .arg(body->minimumHeight())));
    answer->findChild<QToolButton*>(QStringLiteral("copyButton"))->click();
    QCOMPARE(QApplication::clipboard()->text(), md);
  }

  void damagedConversationIsReportedAndTheOthersWork() {
    const QString name = QStringLiteral("damaged");
    const fs::path dir = profile(name).toStdString();
    int64_t healthy = 0, damaged = 0;
    {
      engram::storage::Database db(dir);
      engram::storage::ConversationRepository repo(db);
      healthy = repo.create("healthy").id;
      repo.append(healthy, {0, 0, "user", "still fine", 0, 0, 0});
      repo.append(healthy, {0, 0, "assistant", "yes", 0, 0, 0});
      damaged = repo.create("damaged").id;
      repo.append(damaged, {0, 0, "user", std::string(20000, 'z'), 0, 0, 0});
    }
    const fs::path file = dir / "engram.db";
    const std::vector<int64_t> pages = overflow_pages(file, "utterances");
    QVERIFY2(pages.size() >= 3, "the long utterance should span overflow pages");
    for (int64_t page : pages)
      overwrite(file, (page - 1) * 4096, "\x7f\xff\xff\xf0");

    // At start the window opens the latest conversation: the damaged one.
    auto w = open_window(name);
    QVERIFY2(w->model_loaded(), qPrintable(w->error_text()));
    QTRY_VERIFY(!w->error_text().isEmpty());
    QVERIFY2(w->error_text().contains(QStringLiteral("damaged")), qPrintable(w->error_text()));
    QTRY_COMPARE(w->conversations()->count(), 2);
    QCOMPARE(w->current_conversation(), qint64(0));
    // The healthy one opens, answers and is stored.
    Q_EMIT w->conversations()->openRequested(healthy);
    QTRY_COMPARE(w->current_conversation(), qint64(healthy));
    QCOMPARE(w->chat()->count(), 2);
    w->sendText(QStringLiteral("and now?"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QCOMPARE(w->chat()->count(), 4);
    // Opening the damaged one again: a message, and the healthy one stays on screen.
    Q_EMIT w->conversations()->openRequested(damaged);
    QTRY_VERIFY(!w->error_text().isEmpty());
    QCOMPARE(w->current_conversation(), qint64(healthy));
    QCOMPARE(w->chat()->count(), 4);
    // Searching by text still finds what is readable.
    w->conversations()->findChild<QLineEdit*>()->setText(QStringLiteral("still fine"));
    QTRY_COMPARE(w->conversations()->count(), 1);
    QCOMPARE(w->conversations()->name_at(0), QStringLiteral("healthy"));
  }

  void refusedTurnGivesTheTextBackAndKeepsTheConversation() {
    auto w = open_window(QStringLiteral("refused"));
    // The default policy answers past the positions (see below); "full" keeps every token and
    // refuses. Chosen through the model bar, which sends it to the assistant.
    choose_policy(*w, QStringLiteral("full"));
    QVERIFY(!w->model_bar()->budget_spin()->isEnabled());
    QCOMPARE(w->model_bar()->memory_policy().spec, std::string("full"));
    w->sendText(QStringLiteral("A first question"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    const qint64 id = w->current_conversation();
    const QString first_answer = w->chat()->at(1)->text();
    // Past the fixture's 2048 positions: the engine refuses the turn.
    const QString too_long = longer_than_the_positions();
    w->sendText(too_long);
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    QVERIFY2(w->error_text().contains(QStringLiteral("positions")), qPrintable(w->error_text()));
    QCOMPARE(w->chat()->count(), 2);
    QCOMPARE(w->input()->toPlainText(), too_long);
    // The app goes on in the same conversation, and the store holds no half turn.
    w->input()->clear();
    w->sendText(QStringLiteral("A shorter one"));
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QCOMPARE(w->current_conversation(), id);
    QCOMPARE(w->chat()->count(), 4);
    w.reset();
    engram::storage::Database db(profile(QStringLiteral("refused")).toStdString(),
                                 engram::storage::Access::kReadOnly);
    const auto stored = engram::storage::ConversationRepository(db).utterances(id);
    QCOMPARE(stored.size(), size_t(4));
    QCOMPARE(QString::fromStdString(stored[1].text), first_answer);
    QCOMPARE(QString::fromStdString(stored[2].text), QStringLiteral("A shorter one"));
  }

  void modelBarShowsAndEmitsMemoryPolicies() {
    engram::ui::register_worker_metatypes();
    engram::ui::ModelBar bar;
    QSignalSpy chosen(&bar, &engram::ui::ModelBar::memoryPolicyChosen);
    const auto last = [&chosen] {
      return qvariant_cast<engram::MemoryPolicyChoice>(chosen.last().at(0));
    };
    QComboBox* combo = bar.policy_combo();
    QSpinBox* budget = bar.budget_spin();
    const auto policies = engram::Assistant::memory_policies();
    QCOMPARE(combo->count(), int(policies.size()));
    for (int i = 0; i < combo->count(); ++i) {
      QCOMPARE(combo->itemText(i), QString::fromStdString(policies[size_t(i)].name));
      QCOMPARE(combo->itemData(i, Qt::ToolTipRole).toString(),
               QString::fromStdString(policies[size_t(i)].summary));
    }
    // Shown without a signal; options stay with the spec.
    bar.set_memory_policy({"streaming:sinks=8", 1024});
    QCOMPARE(chosen.count(), 0);
    QCOMPARE(combo->currentText(), QStringLiteral("streaming"));
    QCOMPARE(bar.policy_options()->text(), QStringLiteral("sinks=8"));
    QCOMPARE(budget->value(), 1024);
    budget->setValue(512);
    QCOMPARE(chosen.count(), 1);
    QCOMPARE(last().spec, std::string("streaming:sinks=8"));
    QCOMPARE(last().kv_budget, int64_t(512));
    // Options typed for the policy shown: its spec with them; cleared, its defaults.
    QLineEdit* options = bar.policy_options();
    options->selectAll();
    QTest::keyClicks(options, QStringLiteral("sinks=16"));
    QTest::keyClick(options, Qt::Key_Return);
    QCOMPARE(chosen.count(), 2);
    QCOMPARE(last().spec, std::string("streaming:sinks=16"));
    QCOMPARE(last().kv_budget, int64_t(512));
    options->clear();
    QTest::keyClick(options, Qt::Key_Return);
    QCOMPARE(last().spec, std::string("streaming"));
    options->setText(QStringLiteral("sinks=8"));
    QTest::keyClick(options, Qt::Key_Return);
    QCOMPARE(last().spec, std::string("streaming:sinks=8"));
    // An unbounded policy: no budget; another policy starts without the options.
    const int before_full = chosen.count();
    combo->setCurrentIndex(combo->findText(QStringLiteral("full")));
    QCOMPARE(chosen.count(), before_full + 1);
    QCOMPARE(last().spec, std::string("full"));
    QVERIFY(options->text().isEmpty());
    QCOMPARE(last().kv_budget, int64_t(0));
    QVERIFY(!budget->isEnabled());
    QCOMPARE(budget->text(), QStringLiteral("default"));
    // Another policy starts from its defaults.
    combo->setCurrentIndex(combo->findText(QStringLiteral("streaming")));
    QCOMPARE(last().spec, std::string("streaming"));
    QVERIFY(budget->isEnabled());
    // 0 or 16 and more: the arrows step over 1..15, a typed 8 is not taken.
    budget->stepUp();
    QCOMPARE(budget->value(), 16);
    QCOMPARE(last().kv_budget, int64_t(16));
    budget->stepDown();
    QCOMPARE(budget->value(), 0);
    budget->setValue(300);
    const int before = chosen.count();
    budget->selectAll();
    QTest::keyClicks(budget, QStringLiteral("8"));
    QTest::keyClick(budget, Qt::Key_Return);
    QCOMPARE(budget->value(), 300);
    QCOMPARE(chosen.count(), before);
    budget->selectAll();
    QTest::keyClicks(budget, QStringLiteral("80"));
    QTest::keyClick(budget, Qt::Key_Return);
    QCOMPARE(budget->value(), 80);
    QCOMPARE(last().kv_budget, int64_t(80));
  }

  void defaultPolicyAnswersPastThePositionsAndEachConversationKeepsItsPolicy() {
    const QString name = QStringLiteral("policies");
    auto w = open_window(name);
    engram::ui_test::set_greedy(*w, 6);
    engram::ui::ModelBar* bar = w->model_bar();
    // The bar lists the assistant's policies and shows the default one.
    QCOMPARE(bar->policy_combo()->count(), int(engram::Assistant::memory_policies().size()));
    const engram::MemoryPolicyChoice defaults = engram::Assistant::default_memory_policy();
    QCOMPARE(bar->memory_policy().spec, defaults.spec);
    QCOMPARE(bar->policy_combo()->currentText(), QString::fromStdString(defaults.spec));
    QCOMPARE(bar->budget_spin()->text(), QStringLiteral("default"));
    QVERIFY(bar->budget_spin()->isEnabled());

    // Past the fixture's 2048 positions: answered, and the memory line says what left attention.
    w->sendText(longer_than_the_positions());
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    QCOMPARE(w->chat()->count(), 2);
    QVERIFY(w->chat()->last()->stats().evicted_tokens > 0);
    const QString note = w->chat()->last()->memory_note_text();
    QVERIFY2(note.contains(QStringLiteral("moved out of attention")), qPrintable(note));
    QVERIFY(w->chat()->at(0)->memory_note_text().isEmpty());
    // The inspector counts the evicted tokens where their KV is: the reply was saved, so the KV
    // that left attention is in the store's runs (disk), with its bytes; none is lost.
    const auto at = [&w](engram::MemoryLocation l) {
      return w->inspector()->model()->snapshot().tokens_by_location[int(l)];
    };
    QTRY_VERIFY(at(engram::MemoryLocation::kDisk) > 0);
    QCOMPARE(at(engram::MemoryLocation::kEvicted), int64_t(0));
    QVERIFY(
        w->inspector()->model()->snapshot().bytes_by_location[int(engram::MemoryLocation::kDisk)] >
        0);
    const QString totals = w->inspector()->totals_text();
    QVERIFY2(totals.contains(QStringLiteral("disk: ")), qPrintable(totals));
    // A unit the policy thinned shows how much of it stays in attention.
    const auto shows_in_attention = [&w] {
      const auto* m = w->inspector()->model();
      for (int r = 0; r < m->rowCount(); ++r) {
        if (m->data(m->index(r, engram::ui::MemoryUnitsModel::kTokens), Qt::DisplayRole)
                .toString()
                .contains(QStringLiteral(" in attention")))
          return true;
      }
      return false;
    };
    QTRY_VERIFY(shows_in_attention());
    // Under streaming (the default, epicache, stores episodes instead of the KV that leaves
    // attention once the chat is clustered), a second long turn moves the first answer wholly
    // out of attention: it is listed where its KV is (the store, after the save), state
    // "evicted, KV kept".
    choose_policy(*w, QStringLiteral("streaming"));
    w->sendText(longer_than_the_positions());
    QTRY_VERIFY_WITH_TIMEOUT(!w->busy(), kReplyTimeoutMs);
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    const auto shows_kept_state = [&w] {
      const auto& units = w->inspector()->model()->snapshot().units;
      return std::any_of(units.begin(), units.end(), [](const engram::MemoryUnit& u) {
        return u.state == "evicted, KV kept" && u.location == engram::MemoryLocation::kDisk;
      });
    };
    QTRY_VERIFY(shows_kept_state());
    QCOMPARE(at(engram::MemoryLocation::kEvicted), int64_t(0));
    const qint64 first = w->current_conversation();

    // SnapKV with a budget of 256 for this conversation, full for a new one.
    choose_policy(*w, QStringLiteral("snapkv"), 256);
    w->newConversation();
    QTRY_VERIFY(w->current_conversation() != 0 && w->current_conversation() != first);
    const qint64 second = w->current_conversation();
    choose_policy(*w, QStringLiteral("full"));
    // Reopened, each shows its own again.
    Q_EMIT w->conversations()->openRequested(first);
    QTRY_COMPARE(w->current_conversation(), first);
    QTRY_COMPARE(bar->policy_combo()->currentText(), QStringLiteral("snapkv"));
    QCOMPARE(bar->memory_policy().spec, std::string("snapkv"));
    QCOMPARE(bar->memory_policy().kv_budget, int64_t(256));
    QCOMPARE(bar->budget_spin()->value(), 256);
    QVERIFY(bar->budget_spin()->isEnabled());
    Q_EMIT w->conversations()->openRequested(second);
    QTRY_COMPARE(w->current_conversation(), second);
    QTRY_COMPARE(bar->policy_combo()->currentText(), QStringLiteral("full"));
    QVERIFY(!bar->budget_spin()->isEnabled());
    Q_EMIT w->conversations()->openRequested(first);
    QTRY_COMPARE(w->current_conversation(), first);
    QVERIFY2(w->error_text().isEmpty(), qPrintable(w->error_text()));
    // An option the policy does not know is refused: a banner says which, and the bar shows the
    // policy in force again (nothing stored).
    bar->policy_options()->setText(QStringLiteral("no_such_option=1"));
    Q_EMIT bar->policy_options()->editingFinished();
    QTRY_VERIFY(w->error_text().contains(QStringLiteral("no_such_option")));
    QTRY_COMPARE(bar->memory_policy().spec, std::string("snapkv"));
    QVERIFY(bar->policy_options()->text().isEmpty());

    // A new window (a new Assistant on the same store) reopens the first with snapkv/256.
    w.reset();
    w = open_window(name);
    QCOMPARE(w->current_conversation(), first);
    QTRY_COMPARE(w->model_bar()->memory_policy().spec, std::string("snapkv"));
    QCOMPARE(w->model_bar()->memory_policy().kv_budget, int64_t(256));
    QCOMPARE(w->model_bar()->budget_spin()->value(), 256);
  }

  void outOfMemoryReadsAsOutOfMemory() {
    using engram::ui::readable_error;
    const QString from_alloc = readable_error(std::bad_alloc());
    QVERIFY2(from_alloc.startsWith(QStringLiteral("Out of memory.")), qPrintable(from_alloc));
    const QString cuda = readable_error(std::runtime_error(
        "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)\n"
        "Exception raised from malloc at c10/cuda/CUDACachingAllocator.cpp:1234\nframe #0 ..."));
    QVERIFY2(cuda.startsWith(QStringLiteral("Out of memory (CUDA out of memory. Tried")),
             qPrintable(cuda));
    QVERIFY(!cuda.contains(QStringLiteral("frame #0")));
    QVERIFY(cuda.contains(QStringLiteral("CPU")));
    const QString cpu = readable_error(std::runtime_error(
        "[enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: not enough memory: "
        "you tried to allocate 1099511627776 bytes."));
    QVERIFY2(cpu.startsWith(QStringLiteral("Out of memory")), qPrintable(cpu));
    const QString other = readable_error(std::runtime_error("line one\nline two\nline three\nx"));
    QCOMPARE(other, QStringLiteral("line one\nline two\nline three"));
  }

  // Decode-time retrieval's offload leaves the working set's retrieval layers in pinned host
  // memory until the next prefill: the inspector's engine line says so.
  void inspectorSaysWhenLayersWaitInHostMemory() {
    engram::ui::MemoryInspector inspector;
    engram::MemorySnapshot s;
    s.engine_device = "cuda:0";
    s.engine_cached_tokens = 33000;
    s.engine_cache_bytes = int64_t{4} << 30;
    s.engine_layers = 32;
    inspector.setSnapshot(s);
    QVERIFY(!inspector.totals_text().contains(QStringLiteral("pinned host memory")));
    s.engine_host_layers = 30;
    inspector.setSnapshot(s);
    QVERIFY2(inspector.totals_text().contains(
                 QStringLiteral("30 of 32 layers in pinned host memory until the next prefill")),
             qPrintable(inspector.totals_text()));
  }
};

QTEST_MAIN(UiWindowTest)
#include "test_ui_window.moc"
