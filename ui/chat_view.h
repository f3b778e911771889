// The chat: one bubble per message, answers rendered as Markdown (QTextDocument::setMarkdown),
// streamed text re-rendered every 50 ms or more (more when a render costs more, so the UI thread
// stays free) parsing only what follows the last safe cut (ui/markdown_stream_split.h), a finished
// answer rendered whole once, and under each answer its time to first token and tokens/s with
// copy and regenerate buttons, and a line on what the memory policy moved out of attention when it
// moved anything.
#pragma once

#include <QFrame>
#include <QScrollArea>
#include <QString>
#include <vector>

#include "core/engine/assistant.h"
#include "ui/markdown_stream_split.h"

class QLabel;
class QProgressBar;
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
  // What the turn does before its first token (indexing, building an episode's cache, a long
  // prefill): a line and a bar in the pending answer, gone when its text or stats arrive.
  void set_progress(const QString& what, qint64 done, qint64 total);
  bool progress_visible() const;
  QString progress_text() const;
  void set_regenerate_visible(bool visible);
  QString stats_text() const;
  // ReplyStats::memory_note of the answer ("memory (streaming, budget 1024): …"); empty: none.
  QString memory_note_text() const;
  // Renders now what append() queued for the timer (tests).
  void render_pending();
  // Characters of Markdown (or plain text) the last render parsed: while an answer streams, the
  // text after the last cut; a finished answer, all of it.
  qsizetype last_render_parsed() const { return last_render_parsed_; }

 Q_SIGNALS:
  void regenerateRequested();

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void render();        // the timer's: a streaming answer, from its last cut on
  void render_whole();  // one setMarkdown (setPlainText) of the whole text
  void fit_height();

  QString role_;
  QString text_;
  QTextBrowser* body_;
  QLabel* footer_;
  QLabel* memory_;
  QLabel* progress_label_;
  QProgressBar* progress_;
  QToolButton* copy_;
  QToolButton* regenerate_;
  QTimer* render_timer_;
  MarkdownStream stream_;
  qsizetype last_render_parsed_ = 0;
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
