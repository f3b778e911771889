// The conversation list: search by text, new, rename, delete (after confirmation). It shows what
// the worker lists from the store and asks the worker for every change.
#pragma once

#include <QVector>
#include <QWidget>

#include "core/engine/assistant.h"

class QLineEdit;
class QListWidget;
class QPushButton;

namespace engram::ui {

class ConversationList : public QWidget {
  Q_OBJECT

 public:
  explicit ConversationList(QWidget* parent = nullptr);
  void set_conversations(const QVector<ConversationInfo>& conversations);
  void set_current(qint64 id);
  qint64 current() const { return current_; }
  QString search_text() const;
  int count() const;
  QString name_at(int row) const;
  QListWidget* list() const { return list_; }
  // Skip the confirmation dialog (tests, scripts).
  void set_confirm_deletes(bool confirm) { confirm_ = confirm; }
  void delete_current();

 Q_SIGNALS:
  void searchChanged(const QString& text);
  void newRequested();
  void openRequested(qint64 id);
  void renameRequested(qint64 id, const QString& name);
  void deleteRequested(qint64 id);

 private:
  void rename_current();

  QLineEdit* search_;
  QListWidget* list_;
  QPushButton* rename_;
  QPushButton* delete_;
  qint64 current_ = 0;
  bool confirm_ = true;
};

}  // namespace engram::ui
