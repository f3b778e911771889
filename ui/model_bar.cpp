#include "ui/model_bar.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>

namespace engram::ui {
namespace {
const QString kChoose = QStringLiteral("\x01choose");
}

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
  status_ = new QLabel(tr("No model loaded"), this);
  status_->setObjectName(QStringLiteral("modelStatus"));
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
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
  layout->addWidget(status_, 1);

  connect(model_, &QComboBox::activated, this, [this](int index) {
    if (model_->itemData(index).toString() == kChoose) {
      choose_folder();
    } else {
      last_index_ = index;
    }
  });
  connect(load_, &QPushButton::clicked, this, [this] { Q_EMIT loadRequested(request()); });
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
    status_->setText(tr("Loading…"));
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
  status_->setText(tr("%1 · %2 layers · %3 · %4 · %5 template · loaded in %6 s")
                       .arg(QString::fromStdString(info.name))
                       .arg(info.layers)
                       .arg(QString::fromStdString(info.device), QString::fromStdString(info.dtype),
                            QString::fromStdString(info.chat_template))
                       .arg(info.load_seconds, 0, 'f', 2));
  status_->setToolTip(QString::fromStdString(info.dir.string()));
}

void ModelBar::set_failed(const QString& message) {
  set_loading(false);
  status_->setText(loaded_.isEmpty() ? tr("Load failed — see the message above the chat")
                                     : tr("Load failed — still using %1").arg(loaded_));
  status_->setToolTip(message);
}

QString ModelBar::status_text() const {
  return status_->text();
}

}  // namespace engram::ui
