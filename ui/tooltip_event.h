// A widget's tooltip from a description of the point under the cursor: shown where there is
// something to say, hidden elsewhere (the plots' and panels' describe_at()).
#pragma once

#include <QEvent>
#include <QHelpEvent>
#include <QString>
#include <QToolTip>
#include <QWidget>

namespace engram::ui {

// Call from the widget's event(): true when `event` was a tooltip request (now answered).
template <typename Describe>
bool answer_tooltip(QWidget* widget, QEvent* event, const Describe& describe) {
  if (event->type() != QEvent::ToolTip) return false;
  auto* help = static_cast<QHelpEvent*>(event);
  const QString text = describe(help->pos());
  if (text.isEmpty()) {
    QToolTip::hideText();
  } else {
    QToolTip::showText(help->globalPos(), text, widget);
  }
  return true;
}

}  // namespace engram::ui
