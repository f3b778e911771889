#include "ui/message_input.h"

#include <QKeyEvent>

namespace engram::ui {

MessageInput::MessageInput(QWidget* parent) : QPlainTextEdit(parent) {
  setObjectName(QStringLiteral("messageInput"));
  setPlaceholderText(tr("Message Engram (Enter sends, Shift+Enter new line)"));
  setTabChangesFocus(true);
}

QSize MessageInput::sizeHint() const {
  return {400, fontMetrics().lineSpacing() * 3 + 16};
}

void MessageInput::keyPressEvent(QKeyEvent* event) {
  const bool enter = event->key() == Qt::Key_Return || event->key() == Qt::Key_Enter;
  if (enter && !(event->modifiers() & Qt::ShiftModifier)) {
    Q_EMIT submitted();
    event->accept();
    return;
  }
  if (enter) {
    insertPlainText(QStringLiteral("\n"));
    event->accept();
    return;
  }
  QPlainTextEdit::keyPressEvent(event);
}

}  // namespace engram::ui
