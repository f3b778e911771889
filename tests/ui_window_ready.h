// Shared by the UI suites: show a MainWindow and wait until it is ready for a test to act.
#pragma once

#include <QElapsedTimer>
#include <QSignalSpy>
#include <QtTest>

#include "ui/conversation_list.h"
#include "ui/main_window.h"

namespace engram::ui_test {

inline constexpr int kModelTimeoutMs = 120000;

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

}  // namespace engram::ui_test
