#include "ui/chat_view.h"

#include <QApplication>
#include <QClipboard>
#include <QElapsedTimer>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QResizeEvent>
#include <QScrollBar>
#include <QTextBrowser>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>

namespace engram::ui {
namespace {
// Streaming re-renders the answer's Markdown after its last cut (a render of a long answer costs
// about as much as a short one's), a resize or the finished answer all of it: wait at least
// kRenderMs between renders and at least kRenderCostFactor times the last render's cost, so
// rendering never takes more than about a quarter of the UI thread.
constexpr int kRenderMs = 50;
constexpr int kRenderCostFactor = 3;
constexpr int kRenderMaxMs = 500;
}  // namespace

MessageBubble::MessageBubble(const QString& role, const QString& text, QWidget* parent)
    : QFrame(parent), role_(role), text_(text) {
  setObjectName(role == QLatin1String("user") ? QStringLiteral("userBubble")
                                              : QStringLiteral("assistantBubble"));
  setFrameShape(QFrame::StyledPanel);
  setAutoFillBackground(true);
  // Palette roles, not colours: the bubbles follow a light/dark switch of the system palette.
  setBackgroundRole(role == QLatin1String("user") ? QPalette::AlternateBase : QPalette::Base);

  auto* who = new QLabel(role == QLatin1String("user") ? tr("You") : tr("Engram"), this);
  QFont bold = who->font();
  bold.setBold(true);
  who->setFont(bold);
  body_ = new QTextBrowser(this);
  body_->setObjectName(QStringLiteral("messageBody"));
  body_->setFrameShape(QFrame::NoFrame);
  body_->setOpenExternalLinks(true);
  body_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  body_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  // The bubble takes the chat's width and the text wraps to it (never the other way round).
  body_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
  body_->setMinimumWidth(0);
  // The bubble's colour shows through. Only the Base role is set here (no style sheet, which
  // would freeze the whole palette): Text keeps following the system palette when it changes.
  QPalette transparent;
  transparent.setColor(QPalette::Base, Qt::transparent);
  body_->setPalette(transparent);
  body_->viewport()->setAutoFillBackground(false);
  body_->viewport()->installEventFilter(this);
  // Streaming edits the document in place: keep no undo history of them.
  body_->document()->setUndoRedoEnabled(false);
  // A line in the footer's style under the answer (the stats wrap in a narrow chat instead of
  // being cut).
  const auto quiet_line = [this](const char* name) {
    auto* label = new QLabel(this);
    label->setObjectName(QString::fromLatin1(name));
    label->setForegroundRole(QPalette::PlaceholderText);
    label->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    label->setMinimumWidth(0);
    label->setWordWrap(true);
    return label;
  };
  footer_ = quiet_line("replyStats");
  // What the memory policy did in this turn, under the stats.
  memory_ = quiet_line("replyMemory");
  memory_->setTextFormat(Qt::PlainText);
  memory_->setVisible(false);
  // What the turn does before its first token.
  progress_label_ = quiet_line("replyProgressText");
  progress_label_->setTextFormat(Qt::PlainText);
  progress_label_->setVisible(false);
  progress_ = new QProgressBar(this);
  progress_->setObjectName(QStringLiteral("replyProgress"));
  progress_->setTextVisible(false);
  progress_->setMaximumHeight(6);
  progress_->setVisible(false);
  copy_ = new QToolButton(this);
  copy_->setObjectName(QStringLiteral("copyButton"));
  copy_->setText(tr("Copy"));
  copy_->setAutoRaise(true);
  regenerate_ = new QToolButton(this);
  regenerate_->setObjectName(QStringLiteral("regenerateButton"));
  regenerate_->setText(tr("Regenerate"));
  regenerate_->setAutoRaise(true);
  regenerate_->setVisible(false);
  auto* bottom = new QHBoxLayout;
  bottom->addWidget(footer_, 1);
  bottom->addWidget(copy_);
  bottom->addWidget(regenerate_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(10, 6, 10, 4);
  layout->setSpacing(2);
  layout->addWidget(who);
  layout->addWidget(body_);
  layout->addWidget(progress_label_);
  layout->addWidget(progress_);
  layout->addLayout(bottom);
  layout->addWidget(memory_);
  footer_->setVisible(false);
  copy_->setVisible(role != QLatin1String("user"));

  render_timer_ = new QTimer(this);
  render_timer_->setSingleShot(true);
  render_timer_->setInterval(kRenderMs);
  connect(render_timer_, &QTimer::timeout, this, &MessageBubble::render);
  connect(copy_, &QToolButton::clicked, this,
          [this] { QApplication::clipboard()->setText(text_); });
  connect(regenerate_, &QToolButton::clicked, this, &MessageBubble::regenerateRequested);
  render_whole();
}

void MessageBubble::append(const QString& text) {
  if (!text.isEmpty()) set_progress({}, 0, 0);
  text_ += text;
  if (!render_timer_->isActive()) render_timer_->start();
}

void MessageBubble::set_text(const QString& text) {
  // The final text of a streamed answer is usually what was streamed: render only if it differs,
  // a render is still pending or the body holds a streamed rendering (cut into pieces), so the
  // finished answer is exactly one setMarkdown of its text.
  if (text == text_ && !render_timer_->isActive() && !stream_.active()) return;
  text_ = text;
  render_whole();
}

void MessageBubble::render_pending() {
  if (render_timer_->isActive()) render();
}

void MessageBubble::render() {
  if (role_ == QLatin1String("user") || text_.isEmpty()) {
    render_whole();
    return;
  }
  render_timer_->stop();
  QElapsedTimer cost;
  cost.start();
  stream_.render(*body_->document(), text_);
  last_render_parsed_ = stream_.last_parsed();
  fit_height();
  render_timer_->setInterval(
      std::clamp(static_cast<int>(cost.elapsed()) * kRenderCostFactor, kRenderMs, kRenderMaxMs));
}

void MessageBubble::render_whole() {
  render_timer_->stop();
  QElapsedTimer cost;
  cost.start();
  stream_.reset();
  // User text is shown as typed; answers are Markdown.
  if (role_ == QLatin1String("user")) {
    body_->setPlainText(text_);
  } else {
    body_->setMarkdown(text_.isEmpty() ? QStringLiteral("…") : text_);
  }
  last_render_parsed_ = text_.size();
  fit_height();
  render_timer_->setInterval(
      std::clamp(static_cast<int>(cost.elapsed()) * kRenderCostFactor, kRenderMs, kRenderMaxMs));
}

void MessageBubble::fit_height() {
  // Setting the width lays the whole document out again, even when it is the same.
  QTextDocument* doc = body_->document();
  if (doc->textWidth() != body_->viewport()->width()) doc->setTextWidth(body_->viewport()->width());
  const int h = static_cast<int>(body_->document()->size().height()) + 4;
  body_->setFixedHeight(std::max(h, body_->fontMetrics().height() + 8));
}

bool MessageBubble::eventFilter(QObject* watched, QEvent* event) {
  // The text's width is known only once the layout has sized the body (after the bubble's own
  // resize): wrap again whenever the body's width changes.
  if (watched == body_->viewport() && event->type() == QEvent::Resize &&
      static_cast<QResizeEvent*>(event)->size().width() !=
          static_cast<QResizeEvent*>(event)->oldSize().width()) {
    if (stream_.active()) {
      // The seams no longer fall where lines break: cut the streamed text again at this width.
      fit_height();
      stream_.reset();
      render();
    } else {
      fit_height();
    }
  }
  return QFrame::eventFilter(watched, event);
}

void MessageBubble::set_stats(const ReplyStats& s) {
  stats_ = s;
  set_progress({}, 0, 0);
  if (render_timer_->isActive() || stream_.active()) render_whole();
  QString text = tr("first token %1 ms · %2 tokens/s · %3 tokens")
                     .arg(s.time_to_first_token_ms, 0, 'f', 0)
                     .arg(s.tokens_per_s, 0, 'f', 1)
                     .arg(s.generated_tokens);
  if (s.reused_tokens > 0) text += tr(" · %1 prompt tokens reused").arg(s.reused_tokens);
  if (s.stop_reason == "cancelled") text += tr(" · stopped");
  if (s.stop_reason == "length") text += tr(" · token limit");
  footer_->setText(text);
  footer_->setVisible(true);
  memory_->setText(QString::fromStdString(s.memory_note));
  memory_->setVisible(!s.memory_note.empty());
}

void MessageBubble::set_progress(const QString& what, qint64 done, qint64 total) {
  const bool show = !what.isEmpty();
  progress_label_->setText(what);
  progress_label_->setVisible(show);
  progress_->setVisible(show && total > 0);
  if (total > 0) {
    // A QProgressBar counts in int: tokens of a long history fit, but scale to per mille anyway.
    progress_->setRange(0, 1000);
    progress_->setValue(static_cast<int>(1000 * std::clamp<qint64>(done, 0, total) / total));
  }
}

bool MessageBubble::progress_visible() const {
  return !progress_label_->isHidden();
}

QString MessageBubble::progress_text() const {
  return progress_label_->text();
}

void MessageBubble::set_note(const QString& note) {
  footer_->setText(note);
  footer_->setVisible(!note.isEmpty());
}

QString MessageBubble::stats_text() const {
  return footer_->text();
}

QString MessageBubble::memory_note_text() const {
  return memory_->isVisibleTo(this) ? memory_->text() : QString();
}

void MessageBubble::set_regenerate_visible(bool visible) {
  regenerate_->setVisible(visible);
}

ChatView::ChatView(QWidget* parent) : QScrollArea(parent) {
  setObjectName(QStringLiteral("chatView"));
  setWidgetResizable(true);
  setFrameShape(QFrame::NoFrame);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  content_ = new QWidget(this);
  layout_ = new QVBoxLayout(content_);
  layout_->setContentsMargins(12, 12, 12, 12);
  layout_->setSpacing(10);
  placeholder_ =
      new QLabel(tr("Ask anything. Enter sends, Shift+Enter starts a new line."), content_);
  placeholder_->setAlignment(Qt::AlignCenter);
  placeholder_->setForegroundRole(QPalette::PlaceholderText);
  layout_->addWidget(placeholder_);
  layout_->addStretch(1);
  setWidget(content_);
  // Follow the end of the chat while it is in view (streaming, a footer that wraps after the
  // answer); a person who scrolled up to read stays where they are.
  connect(verticalScrollBar(), &QScrollBar::valueChanged, this,
          [this](int value) { at_end_ = value >= verticalScrollBar()->maximum() - 4; });
  connect(verticalScrollBar(), &QScrollBar::rangeChanged, this, [this](int, int max) {
    if (at_end_ || busy_) verticalScrollBar()->setValue(max);
  });
}

void ChatView::clear() {
  for (auto* b : bubbles_)
    b->deleteLater();
  bubbles_.clear();
  placeholder_->setVisible(true);
}

MessageBubble* ChatView::add_message(const QString& role, const QString& text) {
  auto* bubble = new MessageBubble(role, text, content_);
  connect(bubble, &MessageBubble::regenerateRequested, this, &ChatView::regenerateRequested);
  layout_->insertWidget(layout_->count() - 1, bubble);
  bubbles_.push_back(bubble);
  placeholder_->setVisible(false);
  update_regenerate_buttons();
  scroll_to_end();
  return bubble;
}

void ChatView::remove_last() {
  if (bubbles_.empty()) return;
  bubbles_.back()->deleteLater();
  bubbles_.pop_back();
  placeholder_->setVisible(bubbles_.empty());
  update_regenerate_buttons();
}

void ChatView::set_busy(bool busy) {
  busy_ = busy;
  update_regenerate_buttons();
}

void ChatView::scroll_to_end() {
  at_end_ = true;
  QTimer::singleShot(0, this,
                     [this] { verticalScrollBar()->setValue(verticalScrollBar()->maximum()); });
}

void ChatView::update_regenerate_buttons() {
  for (size_t i = 0; i < bubbles_.size(); ++i) {
    const bool last_answer =
        i + 1 == bubbles_.size() && bubbles_[i]->role() == QLatin1String("assistant");
    bubbles_[i]->set_regenerate_visible(last_answer && !busy_);
  }
}

}  // namespace engram::ui
