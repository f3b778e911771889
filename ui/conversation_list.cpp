#include "ui/conversation_list.h"

#include <QDateTime>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLineEdit>
#include <QListWidget>
#include <QMessageBox>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>

namespace engram::ui {

ConversationList::ConversationList(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("conversationList"));
  search_ = new QLineEdit(this);
  search_->setPlaceholderText(tr("Search conversations"));
  search_->setClearButtonEnabled(true);
  list_ = new QListWidget(this);
  list_->setUniformItemSizes(true);
  list_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  list_->setTextElideMode(Qt::ElideRight);
  auto* create = new QPushButton(tr("New"), this);
  create->setToolTip(tr("New conversation (Ctrl+N)"));
  rename_ = new QPushButton(tr("Rename"), this);
  delete_ = new QPushButton(tr("Delete"), this);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(create);
  buttons->addWidget(rename_);
  buttons->addWidget(delete_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addWidget(search_);
  layout->addWidget(list_, 1);
  layout->addLayout(buttons);

  // Searching hits the store: wait for a pause in typing.
  auto* debounce = new QTimer(this);
  debounce->setSingleShot(true);
  debounce->setInterval(200);
  connect(search_, &QLineEdit::textChanged, debounce, qOverload<>(&QTimer::start));
  connect(debounce, &QTimer::timeout, this, [this] { Q_EMIT searchChanged(search_->text()); });
  connect(create, &QPushButton::clicked, this, &ConversationList::newRequested);
  connect(rename_, &QPushButton::clicked, this, &ConversationList::rename_current);
  connect(delete_, &QPushButton::clicked, this, &ConversationList::delete_current);
  connect(list_, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) {
    Q_EMIT openRequested(item->data(Qt::UserRole).toLongLong());
  });
  connect(list_, &QListWidget::itemClicked, this, [this](QListWidgetItem* item) {
    const qint64 id = item->data(Qt::UserRole).toLongLong();
    if (id != current_) Q_EMIT openRequested(id);
  });
  connect(list_, &QListWidget::itemDoubleClicked, this, [this] { rename_current(); });
}

QString ConversationList::search_text() const {
  return search_->text();
}
int ConversationList::count() const {
  return list_->count();
}
QString ConversationList::name_at(int row) const {
  return list_->item(row)->text();
}

void ConversationList::set_conversations(const QVector<ConversationInfo>& conversations) {
  list_->clear();
  for (const auto& c : conversations) {
    auto* item = new QListWidgetItem(QString::fromStdString(c.name), list_);
    item->setData(Qt::UserRole, QVariant::fromValue<qlonglong>(c.id));
    item->setToolTip(tr("Created %1\nLast used %2")
                         .arg(QDateTime::fromMSecsSinceEpoch(c.created_ms).toString(Qt::TextDate),
                              QDateTime::fromMSecsSinceEpoch(c.updated_ms).toString(Qt::TextDate)));
  }
  set_current(current_);
}

void ConversationList::set_current(qint64 id) {
  current_ = id;
  for (int i = 0; i < list_->count(); ++i) {
    if (list_->item(i)->data(Qt::UserRole).toLongLong() == id) {
      list_->setCurrentRow(i);
      break;
    }
  }
  rename_->setEnabled(id != 0);
  delete_->setEnabled(id != 0);
}

void ConversationList::rename_current() {
  auto* item = list_->currentItem();
  if (!item) return;
  bool ok = false;
  const QString name = QInputDialog::getText(this, tr("Rename conversation"), tr("Name"),
                                             QLineEdit::Normal, item->text(), &ok);
  if (ok && !name.trimmed().isEmpty() && name != item->text()) {
    Q_EMIT renameRequested(item->data(Qt::UserRole).toLongLong(), name.trimmed());
  }
}

void ConversationList::delete_current() {
  auto* item = list_->currentItem();
  if (!item) return;
  if (confirm_ &&
      QMessageBox::question(
          this, tr("Delete conversation"),
          tr("Delete “%1” and its memory? This cannot be undone.").arg(item->text()),
          QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel) != QMessageBox::Yes) {
    return;
  }
  Q_EMIT deleteRequested(item->data(Qt::UserRole).toLongLong());
}

}  // namespace engram::ui
