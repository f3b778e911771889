// Shared by the UI suites: show a MainWindow and wait until it is ready for a test to act, and
// watch an answer grow while the worker generates it.
#pragma once

#include <QElapsedTimer>
#include <QFile>
#include <QSignalSpy>
#include <QStringList>
#include <QTimer>
#include <QtTest>

#include "ui/chat_view.h"
#include "ui/conversation_list.h"
#include "ui/main_window.h"

namespace engram::ui_test {

inline constexpr int kModelTimeoutMs = 120000;

// The UI suites run on the small CPU fixture, not the bundled model: replies in milliseconds.
inline void use_fixture_model() {
  QVERIFY2(QFile::exists(QStringLiteral(ENGRAM_TEST_DATA "/models/llama-gqa/config.json")),
           "fixture model missing");
  qputenv("ENGRAM_MODEL_DIR", ENGRAM_TEST_DATA "/models/llama-gqa");
}

// Shows the window and waits until its model has loaded (or failed, which the caller checks
// through model_loaded()) and until the first listing and the reopening of the last conversation
// (when there is one) have landed, so that what a test does next is not overtaken by them.
inline void show_and_wait_ready(ui::MainWindow& w) {
  QSignalSpy listed(&w, &ui::MainWindow::conversationsRefreshed);
  QSignalSpy shown(&w, &ui::MainWindow::conversationShown);
  w.show();
  QElapsedTimer clock;
  clock.start();
  while (!w.model_loaded() && w.error_text().isEmpty() && clock.elapsed() < kModelTimeoutMs)
    QTest::qWait(10);
  while (listed.isEmpty() && clock.elapsed() < kModelTimeoutMs)
    QTest::qWait(10);
  while (w.conversations()->count() > 0 && shown.isEmpty() && w.error_text().isEmpty() &&
         clock.elapsed() < kModelTimeoutMs)
    QTest::qWait(10);
}

// Greedy decoding with a cap on the reply, so that a test's answers repeat run to run.
inline void set_greedy(ui::MainWindow& w, int64_t max_new_tokens) {
  AssistantSampling s;
  s.temperature = 0;
  s.max_new_tokens = max_new_tokens;
  w.set_sampling(s);
}

// Every distinct text of the last chat bubble while the window is busy, polled each millisecond
// from construction on: a streamed answer shows several growing texts, a blocking one only one.
class StreamedTexts {
 public:
  explicit StreamedTexts(ui::MainWindow& w) {
    QObject::connect(&probe_, &QTimer::timeout, [this, &w] {
      if (w.busy() && w.chat()->last()) {
        const QString t = w.chat()->last()->text();
        if (seen_.isEmpty() || seen_.back() != t) seen_ << t;
      }
    });
    probe_.start(1);
  }
  const QStringList& seen() const { return seen_; }
  void stop() { probe_.stop(); }

 private:
  QStringList seen_;
  QTimer probe_;
};

}  // namespace engram::ui_test
