#include "ui/model_bar.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QResizeEvent>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QValidator>
#include <algorithm>

namespace engram::ui {
namespace {
const QString kChoose = QStringLiteral("\x01choose");

// A budget is 0 (the policy's default) or 16 tokens and more: the arrows step over 1..15, and a
// typed 1..15 is not taken (focus out brings the last good value back).
constexpr int kMinBudget = 16;
constexpr int kMaxBudget = 1000000;

class BudgetSpinBox : public QSpinBox {
 public:
  explicit BudgetSpinBox(QWidget* parent) : QSpinBox(parent) {}

  void stepBy(int steps) override {
    const int v = value();
    if (v == 0 && steps > 0) {
      setValue(kMinBudget + (steps - 1) * singleStep());
    } else if (v > 0 && v + steps * singleStep() < kMinBudget) {
      setValue(0);
    } else {
      QSpinBox::stepBy(steps);
    }
  }

 protected:
  QValidator::State validate(QString& text, int& pos) const override {
    const QValidator::State state = QSpinBox::validate(text, pos);
    if (state != QValidator::Acceptable || text == specialValueText()) return state;
    QString number = text;
    if (number.endsWith(suffix())) number.chop(suffix().size());
    bool ok = false;
    const int v = locale().toInt(number.trimmed(), &ok);
    return ok && v > 0 && v < kMinBudget ? QValidator::Intermediate : state;
  }
};

std::string policy_name(const std::string& spec) {
  return spec.substr(0, spec.find(':'));
}

std::string spec_options(const std::string& spec) {
  const size_t colon = spec.find(':');
  return colon == std::string::npos ? std::string() : spec.substr(colon + 1);
}

}  // namespace

// The status line: as wide as the bar leaves it, elided at the right (the whole line is in the
// tooltip), so the bar never forces the window wider.
class StatusLabel : public QLabel {
 public:
  explicit StatusLabel(QWidget* parent) : QLabel(parent) {}
  void set_full_text(const QString& text) {
    full_ = text;
    elide();
  }
  QString full_text() const { return full_; }
  QSize minimumSizeHint() const override {
    return {fontMetrics().horizontalAdvance(QStringLiteral("Load…")),
            QLabel::minimumSizeHint().height()};
  }
  QSize sizeHint() const override {
    return {fontMetrics().horizontalAdvance(full_) + 8, QLabel::sizeHint().height()};
  }

 protected:
  void resizeEvent(QResizeEvent* event) override {
    QLabel::resizeEvent(event);
    elide();
  }

 private:
  void elide() { setText(fontMetrics().elidedText(full_, Qt::ElideRight, width())); }
  QString full_;
};

ModelBar::ModelBar(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("modelBar"));
  model_ = new QComboBox(this);
  model_->setMinimumContentsLength(22);
  model_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  const QString bundled =
      QString::fromStdString(Assistant::bundled_model_dir().filename().string());
  model_->addItem(tr("Bundled model (%1)").arg(bundled), QString());
  model_->addItem(tr("Choose a folder…"), kChoose);
  device_ = new QComboBox(this);
  device_->addItems({QStringLiteral("auto"), QStringLiteral("cpu"), QStringLiteral("cuda")});
  device_->setToolTip(tr("Device"));
  dtype_ = new QComboBox(this);
  dtype_->addItems({QStringLiteral("auto"), QStringLiteral("f32"), QStringLiteral("bf16"),
                    QStringLiteral("f16")});
  dtype_->setToolTip(tr("Compute dtype (auto: bf16 on CUDA, f32 on CPU)"));
  load_ = new QPushButton(tr("Load"), this);
  load_->setObjectName(QStringLiteral("loadModelButton"));
  progress_ = new QProgressBar(this);
  progress_->setMaximumWidth(160);
  progress_->setTextVisible(true);
  progress_->setVisible(false);
  status_ = new StatusLabel(this);
  status_->set_full_text(tr("No model loaded"));
  status_->setObjectName(QStringLiteral("modelStatus"));
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  policy_combo_ = new QComboBox(this);
  policy_combo_->setObjectName(QStringLiteral("memoryPolicyCombo"));
  policies_ = Assistant::memory_policies();
  for (const MemoryPolicyInfo& p : policies_) {
    const QString name = QString::fromStdString(p.name);
    policy_combo_->addItem(name, name);
    policy_combo_->setItemData(policy_combo_->count() - 1, QString::fromStdString(p.summary),
                               Qt::ToolTipRole);
  }
  options_ = new QLineEdit(this);
  options_->setObjectName(QStringLiteral("memoryPolicyOptions"));
  options_->setPlaceholderText(tr("options"));
  options_->setClearButtonEnabled(true);
  options_->setMaximumWidth(options_->fontMetrics().horizontalAdvance(QStringLiteral("x")) * 24);
  options_->setToolTip(
      tr("The memory policy's options, key=value separated by commas (e.g. embed=1: EpiCache "
         "routes by word stems; tau=20: a new episode below a cosine of 0.20); empty: its "
         "defaults. An option the policy does not know is refused."));
  budget_ = new BudgetSpinBox(this);
  budget_->setObjectName(QStringLiteral("kvBudgetSpin"));
  budget_->setRange(0, kMaxBudget);
  budget_->setSingleStep(64);
  budget_->setSpecialValueText(tr("default"));
  budget_->setKeyboardTracking(false);  // one change per edit, not one per typed digit
  budget_->setToolTip(
      tr("KV budget: tokens per layer the memory policy keeps in attention, 0 or 16 and more "
         "(default: the model's positions less one prefill block)"));
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(6, 2, 6, 2);
  layout->addWidget(new QLabel(tr("Model"), this));
  layout->addWidget(model_);
  layout->addWidget(new QLabel(tr("Device"), this));
  layout->addWidget(device_);
  layout->addWidget(new QLabel(tr("dtype"), this));
  layout->addWidget(dtype_);
  layout->addWidget(load_);
  layout->addWidget(progress_);
  layout->addWidget(new QLabel(tr("Memory"), this));
  layout->addWidget(policy_combo_);
  layout->addWidget(options_);
  layout->addWidget(new QLabel(tr("KV budget"), this));
  layout->addWidget(budget_);
  layout->addWidget(status_, 1);
  set_memory_policy(Assistant::default_memory_policy());

  connect(model_, &QComboBox::activated, this, [this](int index) {
    if (model_->itemData(index).toString() == kChoose) {
      choose_folder();
    } else {
      last_index_ = index;
    }
  });
  connect(load_, &QPushButton::clicked, this, [this] { Q_EMIT loadRequested(request()); });
  connect(policy_combo_, &QComboBox::currentIndexChanged, this, [this] { policy_edited(); });
  connect(budget_, &QSpinBox::valueChanged, this, [this] { policy_edited(); });
  connect(options_, &QLineEdit::editingFinished, this, [this] { policy_edited(); });
}

bool ModelBar::bounded(int index) const {
  const std::string name = policy_combo_->itemData(index).toString().toStdString();
  for (const MemoryPolicyInfo& p : policies_) {
    if (p.name == name) return p.bounded;
  }
  return true;
}

void ModelBar::policy_edited() {
  const int index = policy_combo_->currentIndex();
  if (index < 0) return;
  const std::string name = policy_combo_->itemData(index).toString().toStdString();
  MemoryPolicyChoice next;
  // The same policy takes the options shown ("streaming:sinks=8"); another one starts from its
  // defaults.
  if (policy_name(policy_.spec) != name) {
    const QSignalBlocker block(options_);
    options_->clear();
    next.spec = name;
  } else {
    const std::string options = options_->text().trimmed().toStdString();
    next.spec = options.empty() ? name : name + ":" + options;
  }
  const bool takes_budget = bounded(index);
  next.kv_budget = takes_budget ? budget_->value() : 0;
  {
    const QSignalBlocker block(budget_);
    budget_->setEnabled(takes_budget);
    budget_->setValue(static_cast<int>(next.kv_budget));
  }
  policy_combo_->setToolTip(policy_combo_->itemData(index, Qt::ToolTipRole).toString());
  if (next.spec == policy_.spec && next.kv_budget == policy_.kv_budget) return;
  policy_ = next;
  Q_EMIT memoryPolicyChosen(policy_);
}

void ModelBar::set_memory_policy(const MemoryPolicyChoice& choice) {
  const QSignalBlocker block_combo(policy_combo_);
  const QSignalBlocker block_budget(budget_);
  const QSignalBlocker block_options(options_);
  options_->setText(QString::fromStdString(spec_options(choice.spec)));
  const QString name = QString::fromStdString(policy_name(choice.spec));
  int index = policy_combo_->findData(name);
  if (index < 0) {  // a policy this build does not list: shown as it is
    policy_combo_->addItem(name, name);
    index = policy_combo_->count() - 1;
  }
  policy_combo_->setCurrentIndex(index);
  policy_combo_->setToolTip(policy_combo_->itemData(index, Qt::ToolTipRole).toString());
  budget_->setEnabled(bounded(index));
  budget_->setValue(static_cast<int>(std::clamp<int64_t>(choice.kv_budget, 0, kMaxBudget)));
  policy_ = choice;
}

void ModelBar::choose_folder() {
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Hugging Face model folder"));
  if (dir.isEmpty()) {
    model_->setCurrentIndex(last_index_);
    return;
  }
  add_dir(dir);
  Q_EMIT loadRequested(request());
}

void ModelBar::add_dir(const QString& dir) {
  int index = model_->findData(dir);
  if (index < 0) {
    index = model_->count() - 1;  // before "Choose a folder…"
    model_->insertItem(index, QFileInfo(dir).fileName(), dir);
    model_->setItemData(index, dir, Qt::ToolTipRole);
  }
  model_->setCurrentIndex(index);
  last_index_ = index;
}

void ModelBar::set_choice(const QString& dir, const QString& device, const QString& dtype) {
  if (dir.isEmpty()) {
    model_->setCurrentIndex(0);
    last_index_ = 0;
  } else {
    add_dir(dir);
  }
  device_->setCurrentText(device.isEmpty() ? QStringLiteral("auto") : device);
  dtype_->setCurrentText(dtype.isEmpty() ? QStringLiteral("auto") : dtype);
}

QString ModelBar::dir() const {
  const QString d = model_->currentData().toString();
  return d == kChoose ? QString() : d;
}
QString ModelBar::device() const {
  return device_->currentText();
}
QString ModelBar::dtype() const {
  return dtype_->currentText();
}

ModelLoadRequest ModelBar::request() const {
  ModelLoadRequest r;
  r.dir = dir().toStdString();
  r.device = device().toStdString();
  r.dtype = dtype().toStdString();
  return r;
}

QStringList ModelBar::recent_dirs() const {
  QStringList dirs;
  for (int i = 1; i < model_->count() - 1; ++i)
    dirs << model_->itemData(i).toString();
  return dirs;
}

void ModelBar::set_recent_dirs(const QStringList& dirs) {
  const int keep = model_->currentIndex();
  for (const auto& d : dirs) {
    if (!d.isEmpty() && model_->findData(d) < 0) {
      const int index = model_->count() - 1;
      model_->insertItem(index, QFileInfo(d).fileName(), d);
      model_->setItemData(index, d, Qt::ToolTipRole);
    }
  }
  model_->setCurrentIndex(keep);
}

void ModelBar::set_loading(bool loading) {
  load_->setEnabled(!loading);
  model_->setEnabled(!loading);
  progress_->setVisible(loading);
  if (loading) {
    progress_->setRange(0, 0);
    status_->set_full_text(tr("Loading…"));
  }
}

void ModelBar::set_progress(const ModelLoadProgress& p) {
  if (p.bytes_total > 0) {
    progress_->setRange(0, 1000);
    progress_->setValue(static_cast<int>(1000.0 * p.bytes_done / p.bytes_total));
    progress_->setFormat(QStringLiteral("%1 / %2 MiB")
                             .arg(p.bytes_done / double(1 << 20), 0, 'f', 0)
                             .arg(p.bytes_total / double(1 << 20), 0, 'f', 0));
  }
}

void ModelBar::set_loaded(const ModelInfo& info) {
  set_loading(false);
  loaded_ = tr("%1 · %2 · %3")
                .arg(QString::fromStdString(info.name), QString::fromStdString(info.device),
                     QString::fromStdString(info.dtype));
  status_->set_full_text(tr("%1 · %2 layers · %3 · %4 · %5 template · loaded in %6 s")
                             .arg(QString::fromStdString(info.name))
                             .arg(info.layers)
                             .arg(QString::fromStdString(info.device),
                                  QString::fromStdString(info.dtype),
                                  QString::fromStdString(info.chat_template))
                             .arg(info.load_seconds, 0, 'f', 2));
  status_->setToolTip(status_->full_text() + QLatin1Char('\n') +
                      QString::fromStdString(info.dir.string()));
}

void ModelBar::set_failed(const QString& message) {
  set_loading(false);
  status_->set_full_text(loaded_.isEmpty() ? tr("Load failed — see the message above the chat")
                                           : tr("Load failed — still using %1").arg(loaded_));
  status_->setToolTip(status_->full_text() + QStringLiteral("\n\n") + message);
}

QString ModelBar::status_text() const {
  return status_->full_text();
}

}  // namespace engram::ui
