// The model picker: the bundled model or a Hugging Face folder the person chooses, the device and
// dtype, a Load button, and the progress bar of the background load; then the open conversation's
// memory policy (Assistant::memory_policies()), its options and its KV budget per layer.
#pragma once

#include <QStringList>
#include <QWidget>
#include <vector>

#include "core/engine/assistant.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace engram::ui {

class StatusLabel;

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

  // The memory policy shown (its full spec, e.g. "streaming:sinks=8", and budget; 0 = the
  // policy's default).
  MemoryPolicyChoice memory_policy() const { return policy_; }
  QComboBox* policy_combo() const { return policy_combo_; }
  // The spec's options after the policy's name ("sinks=8", "embed=1,tau=20"); empty: defaults.
  QLineEdit* policy_options() const { return options_; }
  QSpinBox* budget_spin() const { return budget_; }

 public Q_SLOTS:
  // Shows `choice` (the item named by the spec's part before ':'; the full spec is kept) without
  // emitting memoryPolicyChosen.
  void set_memory_policy(const engram::MemoryPolicyChoice& choice);

 Q_SIGNALS:
  void loadRequested(const engram::ModelLoadRequest& request);
  // The person picked another policy, its options or the budget.
  void memoryPolicyChosen(const engram::MemoryPolicyChoice& choice);

 private:
  void add_dir(const QString& dir);
  void choose_folder();
  void policy_edited();
  bool bounded(int policy_index) const;

  QComboBox* model_;
  QComboBox* device_;
  QComboBox* dtype_;
  QPushButton* load_;
  QProgressBar* progress_;
  StatusLabel* status_;
  QComboBox* policy_combo_;
  QLineEdit* options_;
  QSpinBox* budget_;
  std::vector<MemoryPolicyInfo> policies_;
  MemoryPolicyChoice policy_;
  int last_index_ = 0;
  QString loaded_;  // what set_loaded() last showed; empty before any model loaded
};

}  // namespace engram::ui
