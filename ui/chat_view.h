// The chat: one bubble per message, answers rendered as Markdown (QTextDocument::setMarkdown),
// streamed text re-rendered every 50 ms or more (more as the answer grows, so the UI thread stays
// free), and under each answer its time to first token and tokens/s with copy and regenerate
// buttons, and a line on what the memory policy moved out of attention when it moved anything.
#pragma once

#include <QFrame>
#include <QScrollArea>
#include <QString>
#include <vector>

#include "core/engine/assistant.h"

class QLabel;
class QTextBrowser;
class QTimer;
class QToolButton;
class QVBoxLayout;

namespace engram::ui {

class MessageBubble : public QFrame {
  Q_OBJECT

 public:
  MessageBubble(const QString& role, const QString& text, QWidget* parent = nullptr);
  void append(const QString& text);
  void set_text(const QString& text);
  QString text() const { return text_; }
  QString role() const { return role_; }
  void set_stats(const ReplyStats& stats);
  const ReplyStats& stats() const { return stats_; }
  void set_note(const QString& note);
  void set_regenerate_visible(bool visible);
  QString stats_text() const;
  // ReplyStats::memory_note of the answer ("memory (streaming, budget 1024): …"); empty: none.
  QString memory_note_text() const;

 Q_SIGNALS:
  void regenerateRequested();

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void render();
  void fit_height();

  QString role_;
  QString text_;
  QTextBrowser* body_;
  QLabel* footer_;
  QLabel* memory_;
  QToolButton* copy_;
  QToolButton* regenerate_;
  QTimer* render_timer_;
  ReplyStats stats_;
};

class ChatView : public QScrollArea {
  Q_OBJECT

 public:
  explicit ChatView(QWidget* parent = nullptr);
  void clear();
  MessageBubble* add_message(const QString& role, const QString& text);
  MessageBubble* last() const { return bubbles_.empty() ? nullptr : bubbles_.back(); }
  int count() const { return static_cast<int>(bubbles_.size()); }
  MessageBubble* at(int i) const { return bubbles_[static_cast<size_t>(i)]; }
  void remove_last();
  void set_busy(bool busy);
  void scroll_to_end();

 Q_SIGNALS:
  void regenerateRequested();

 private:
  void update_regenerate_buttons();

  QWidget* content_;
  QVBoxLayout* layout_;
  QLabel* placeholder_;
  std::vector<MessageBubble*> bubbles_;
  bool busy_ = false;
  bool at_end_ = true;
};

}  // namespace engram::ui
