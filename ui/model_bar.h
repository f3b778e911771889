// The model picker: the bundled model or a Hugging Face folder the person chooses, the device and
// dtype, a Load button, and the progress bar of the background load.
#pragma once

#include <QStringList>
#include <QWidget>

#include "core/engine/assistant.h"

class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;

namespace engram::ui {

class ModelBar : public QWidget {
  Q_OBJECT

 public:
  explicit ModelBar(QWidget* parent = nullptr);

  // Empty dir: the bundled model.
  void set_choice(const QString& dir, const QString& device, const QString& dtype);
  ModelLoadRequest request() const;
  QString dir() const;
  QString device() const;
  QString dtype() const;
  QStringList recent_dirs() const;
  void set_recent_dirs(const QStringList& dirs);

  void set_loading(bool loading);
  void set_progress(const ModelLoadProgress& progress);
  void set_loaded(const ModelInfo& info);
  void set_failed(const QString& message);
  QString status_text() const;
  QProgressBar* progress_bar() const { return progress_; }

 Q_SIGNALS:
  void loadRequested(const engram::ModelLoadRequest& request);

 private:
  void add_dir(const QString& dir);
  void choose_folder();

  QComboBox* model_;
  QComboBox* device_;
  QComboBox* dtype_;
  QPushButton* load_;
  QProgressBar* progress_;
  QLabel* status_;
  int last_index_ = 0;
  QString loaded_;  // what set_loaded() last showed; empty before any model loaded
};

}  // namespace engram::ui
