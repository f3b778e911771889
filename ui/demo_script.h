// Drives the real window from a text file, one command a line, for screenshots and demos
// (`engram --demo-script FILE`). Commands wait for what they start:
//   wait-model                 until the model has loaded (or failed)
//   new                        a new conversation
//   type TEXT                  types TEXT into the message box as key presses, then Enter
//   wait-reply                 until the answer is complete
//   regenerate                 regenerates the last answer (and waits)
//   stop                       stops the answer being generated (as Esc does)
//   max-tokens N               the most tokens an answer may have from now on
//   load DIR [DEVICE [DTYPE]]  loads a model folder (waits until it loaded or failed)
//   trace FILE                 opens a trace file (engram-cli --trace) in the layer timeline
//   retrievals on|off          the shown request's retrieval map in place of its timeline
//   palette dark|light         switches the application palette, as a system theme change does
//   sleep MS
//   resize W H
//   screenshot WHAT FILE       WHAT: window, chat, conversations, model, timeline, memory
//   export-timeline FILE       PNG or SVG by extension
//   quit
// '#' starts a comment. A failing command prints why and quits with status 1.
#pragma once

#include <QObject>
#include <QStringList>

namespace engram::ui {

class MainWindow;

class DemoScript : public QObject {
  Q_OBJECT

 public:
  DemoScript(MainWindow* window, const QString& path, QObject* parent = nullptr);
  void start();

 private:
  void next();
  void wait_until(const std::function<bool()>& done, int timeout_ms);
  void fail(const QString& why);
  bool screenshot(const QString& what, const QString& file);

  MainWindow* window_;
  QStringList lines_;
  int line_ = 0;
};

}  // namespace engram::ui
