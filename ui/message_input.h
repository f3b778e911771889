// The message box: Enter sends, Shift+Enter starts a new line.
#pragma once

#include <QPlainTextEdit>

namespace engram::ui {

class MessageInput : public QPlainTextEdit {
  Q_OBJECT

 public:
  explicit MessageInput(QWidget* parent = nullptr);
  QSize sizeHint() const override;

 Q_SIGNALS:
  void submitted();

 protected:
  void keyPressEvent(QKeyEvent* event) override;
};

}  // namespace engram::ui
