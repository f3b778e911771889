#include "ui/demo_script.h"

#include <QApplication>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFile>
#include <QKeyEvent>
#include <QPalette>
#include <QPixmap>
#include <QStyle>
#include <QTimer>
#include <cstdio>

#include "ui/chat_view.h"
#include "ui/conversation_list.h"
#include "ui/main_window.h"
#include "ui/message_input.h"
#include "ui/model_bar.h"
#include "ui/timeline_panel.h"

namespace engram::ui {
namespace {

// What a desktop's dark theme hands the application.
QPalette dark_palette() {
  QPalette p;
  const QColor window(0x2d, 0x2d, 0x30), base(0x1e, 0x1e, 0x1e), text(0xe8, 0xe8, 0xe8);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, QColor(0x34, 0x34, 0x38));
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::ToolTipBase, base);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, QColor(0x9a, 0x9a, 0x9a));
  p.setColor(QPalette::Highlight, QColor(0x3d, 0x7a, 0xd6));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Mid, QColor(0x55, 0x55, 0x58));
  p.setColor(QPalette::Link, QColor(0x6c, 0xa8, 0xff));
  p.setColor(QPalette::Disabled, QPalette::Text, QColor(0x80, 0x80, 0x80));
  p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0x80, 0x80, 0x80));
  p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(0x80, 0x80, 0x80));
  return p;
}

}  // namespace

DemoScript::DemoScript(MainWindow* window, const QString& path, QObject* parent)
    : QObject(parent), window_(window) {
  QFile file(path);
  if (file.open(QIODevice::ReadOnly | QIODevice::Text)) {
    lines_ = QString::fromUtf8(file.readAll()).split(QLatin1Char('\n'));
  } else {
    lines_ << QStringLiteral("fail cannot read %1").arg(path);
  }
}

void DemoScript::start() {
  QTimer::singleShot(0, this, &DemoScript::next);
}

void DemoScript::fail(const QString& why) {
  std::fprintf(stderr, "demo script line %d: %s\n", line_, qPrintable(why));
  QApplication::exit(1);
}

void DemoScript::wait_until(const std::function<bool()>& done, int timeout_ms) {
  auto* timer = new QTimer(this);
  auto* clock = new QElapsedTimer;
  clock->start();
  connect(timer, &QTimer::timeout, this, [this, timer, clock, done, timeout_ms] {
    if (done()) {
      timer->deleteLater();
      delete clock;
      QTimer::singleShot(0, this, &DemoScript::next);
    } else if (clock->elapsed() > timeout_ms) {
      timer->deleteLater();
      delete clock;
      fail(QStringLiteral("timed out"));
    }
  });
  timer->start(50);
}

bool DemoScript::screenshot(const QString& what, const QString& file) {
  QWidget* widget = nullptr;
  if (what == QLatin1String("window")) widget = window_;
  if (what == QLatin1String("chat")) widget = window_->chat();
  if (what == QLatin1String("conversations")) widget = window_->conversations();
  if (what == QLatin1String("model")) widget = window_->model_bar();
  if (what == QLatin1String("timeline")) widget = window_->panel(QStringLiteral("timeline"));
  if (what == QLatin1String("memory")) widget = window_->panel(QStringLiteral("memory"));
  if (!widget) return false;
  return widget->grab().save(file, "PNG");
}

void DemoScript::next() {
  while (line_ < lines_.size()) {
    const QString line = lines_[line_++].trimmed();
    if (line.isEmpty() || line.startsWith(QLatin1Char('#'))) continue;
    const QString command = line.section(QLatin1Char(' '), 0, 0);
    const QString rest = line.section(QLatin1Char(' '), 1);
    std::fprintf(stderr, "demo: %s\n", qPrintable(line));
    if (command == QLatin1String("wait-model")) {
      wait_until([this] { return window_->model_loaded() || !window_->error_text().isEmpty(); },
                 300000);
      return;
    }
    if (command == QLatin1String("new")) {
      window_->newConversation();
      wait_until([this] { return window_->current_conversation() != 0; }, 10000);
      return;
    }
    if (command == QLatin1String("type")) {
      MessageInput* input = window_->input();
      const int messages = window_->chat()->count();
      input->setFocus();
      for (const QChar c : rest) {
        QKeyEvent press(QEvent::KeyPress, 0, Qt::NoModifier, QString(c));
        QApplication::sendEvent(input, &press);
      }
      QKeyEvent enter(QEvent::KeyPress, Qt::Key_Return, Qt::NoModifier);
      QApplication::sendEvent(input, &enter);
      // A short answer may be over before the first poll: a new message counts as sent too.
      wait_until(
          [this, messages] {
            return window_->busy() || !window_->error_text().isEmpty() ||
                   window_->chat()->count() != messages;
          },
          10000);
      return;
    }
    if (command == QLatin1String("wait-reply")) {
      wait_until([this] { return !window_->busy(); }, 600000);
      return;
    }
    if (command == QLatin1String("regenerate")) {
      window_->regenerate();
      wait_until([this] { return !window_->busy(); }, 600000);
      return;
    }
    if (command == QLatin1String("max-tokens")) {
      AssistantSampling sampling = window_->sampling();
      sampling.max_new_tokens = rest.toLongLong();
      window_->set_sampling(sampling);
      continue;
    }
    if (command == QLatin1String("stop")) {
      window_->stop();
      wait_until([this] { return !window_->busy(); }, 60000);
      return;
    }
    if (command == QLatin1String("load")) {
      ModelLoadRequest request;
      request.dir = rest.section(QLatin1Char(' '), 0, 0).toStdString();
      const QString device = rest.section(QLatin1Char(' '), 1, 1);
      const QString dtype = rest.section(QLatin1Char(' '), 2, 2);
      if (!device.isEmpty()) request.device = device.toStdString();
      if (!dtype.isEmpty()) request.dtype = dtype.toStdString();
      window_->showError(QString());
      window_->loadModel(request);
      wait_until([this] { return window_->model_loaded() || !window_->error_text().isEmpty(); },
                 300000);
      return;
    }
    if (command == QLatin1String("trace")) {
      QString error;
      if (!window_->timeline()->open_trace_file(rest, &error)) {
        fail(QStringLiteral("trace: %1").arg(error));
        return;
      }
      continue;
    }
    if (command == QLatin1String("retrievals")) {
      TimelinePanel* timeline = window_->timeline();
      timeline->show_retrievals(rest == QLatin1String("on"));
      if (timeline->showing_retrievals() != (rest == QLatin1String("on"))) {
        fail(QStringLiteral("retrievals: the shown request has no retrieval map"));
        return;
      }
      QTimer::singleShot(200, this, &DemoScript::next);
      return;
    }
    if (command == QLatin1String("palette")) {
      QApplication::setPalette(rest == QLatin1String("dark")
                                   ? dark_palette()
                                   : QApplication::style()->standardPalette());
      QTimer::singleShot(200, this, &DemoScript::next);
      return;
    }
    if (command == QLatin1String("sleep")) {
      QTimer::singleShot(rest.toInt(), this, &DemoScript::next);
      return;
    }
    if (command == QLatin1String("resize")) {
      window_->resize(rest.section(QLatin1Char(' '), 0, 0).toInt(),
                      rest.section(QLatin1Char(' '), 1, 1).toInt());
      QTimer::singleShot(200, this, &DemoScript::next);
      return;
    }
    if (command == QLatin1String("screenshot")) {
      if (!screenshot(rest.section(QLatin1Char(' '), 0, 0), rest.section(QLatin1Char(' '), 1))) {
        fail(QStringLiteral("screenshot failed: %1").arg(rest));
        return;
      }
      continue;
    }
    if (command == QLatin1String("export-timeline")) {
      const bool ok = rest.endsWith(QLatin1String(".svg")) ? window_->timeline()->export_svg(rest)
                                                           : window_->timeline()->export_png(rest);
      if (!ok) {
        fail(QStringLiteral("export failed: %1").arg(rest));
        return;
      }
      continue;
    }
    if (command == QLatin1String("quit")) {
      window_->close();
      QApplication::exit(0);
      return;
    }
    fail(QStringLiteral("unknown command: %1").arg(line));
    return;
  }
}

}  // namespace engram::ui
