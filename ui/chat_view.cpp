#include "ui/chat_view.h"

#include <QApplication>
#include <QClipboard>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollBar>
#include <QTextBrowser>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

namespace engram::ui {
namespace {
constexpr int kRenderMs = 50;
}

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
  body_->viewport()->setAutoFillBackground(false);
  body_->setStyleSheet(QStringLiteral("QTextBrowser { background: transparent; }"));
  footer_ = new QLabel(this);
  footer_->setObjectName(QStringLiteral("replyStats"));
  footer_->setForegroundRole(QPalette::PlaceholderText);
  footer_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  footer_->setMinimumWidth(0);
  copy_ = new QToolButton(this);
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
  layout->addLayout(bottom);
  footer_->setVisible(false);
  copy_->setVisible(role != QLatin1String("user"));

  render_timer_ = new QTimer(this);
  render_timer_->setSingleShot(true);
  render_timer_->setInterval(kRenderMs);
  connect(render_timer_, &QTimer::timeout, this, &MessageBubble::render);
  connect(copy_, &QToolButton::clicked, this,
          [this] { QApplication::clipboard()->setText(text_); });
  connect(regenerate_, &QToolButton::clicked, this, &MessageBubble::regenerateRequested);
  render();
}

void MessageBubble::append(const QString& text) {
  text_ += text;
  if (!render_timer_->isActive()) render_timer_->start();
}

void MessageBubble::set_text(const QString& text) {
  text_ = text;
  render();
}

void MessageBubble::render() {
  render_timer_->stop();
  // User text is shown as typed; answers are Markdown.
  if (role_ == QLatin1String("user")) {
    body_->setPlainText(text_);
  } else {
    body_->setMarkdown(text_.isEmpty() ? QStringLiteral("…") : text_);
  }
  fit_height();
}

void MessageBubble::fit_height() {
  body_->document()->setTextWidth(body_->viewport()->width());
  const int h = static_cast<int>(body_->document()->size().height()) + 4;
  body_->setFixedHeight(std::max(h, body_->fontMetrics().height() + 8));
}

void MessageBubble::resizeEvent(QResizeEvent* event) {
  QFrame::resizeEvent(event);
  fit_height();
}

void MessageBubble::set_stats(const ReplyStats& s) {
  render();
  QString text = tr("first token %1 ms · %2 tokens/s · %3 tokens")
                     .arg(s.time_to_first_token_ms, 0, 'f', 0)
                     .arg(s.tokens_per_s, 0, 'f', 1)
                     .arg(s.generated_tokens);
  if (s.reused_tokens > 0) text += tr(" · %1 prompt tokens reused").arg(s.reused_tokens);
  if (s.stop_reason == "cancelled") text += tr(" · stopped");
  if (s.stop_reason == "length") text += tr(" · token limit");
  footer_->setText(text);
  footer_->setVisible(true);
}

void MessageBubble::set_note(const QString& note) {
  footer_->setText(note);
  footer_->setVisible(!note.isEmpty());
}

QString MessageBubble::stats_text() const {
  return footer_->text();
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
  connect(verticalScrollBar(), &QScrollBar::rangeChanged, this, [this](int, int max) {
    if (busy_) verticalScrollBar()->setValue(max);
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
